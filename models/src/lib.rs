//! Neural models of tgrag, written in burn and generic over the device (wgpu where a GPU is
//! present); on the CPU each model trains and predicts on its host engine (hand-written forward and
//! backward passes on host buffers, parity-tested against burn's Flex backend), and MiniLM embeds
//! on its fused engine.
//!
//! * [`train`]: the training toolkit every model is built from (the one training loop `fit` with
//!   the one stopping rule, seeded stream, dense layer, strict weight files).
//! * [`minilm`]: sentence embeddings from a BERT, RoBERTa or MPNet sentence-transformers checkpoint
//!   (all-MiniLM-L6-v2 by default), weights read strictly from `model.safetensors`, word pieces from `tokenizer.json`; a fused CPU engine; top
//!   layers fine-tuned as a classifier (`minilm::tune`).
//! * [`gnn`]: graph neural networks (GCN, GraphSAGE, MLP node classifiers and a link predictor for
//!   TopoRAG's evaluation; G-Retriever's and Efficient G-Retriever's graph encoders over batches of
//!   small graphs).
//! * [`graphqa`]: question answering over small textual graphs (a graph encoder and a trained answer
//!   head instead of G-Retriever's LLM).
//! * [`lm`]: the language model that reads soft tokens (graph tokens, prompts) with text: a
//!   checkpoint's encoder made trainable — frozen, with LoRA terms, or fully.
//! * [`planner`]: the autoregressive plan decoder of MoR and PASemiQA.
//! * [`tagger`]: the restriction span tagger of the planner on MoR's plan files.
//! * [`reranker`]: MoR's structure-aware reranker.
//! * [`linalg`]: f64 matrix product and symmetric eigendecomposition (GraphWave's exact mode).
//! * [`simd`]: the instruction-set level of every runtime dispatch (`TGRAG_SIMD`).
//! * [`device`]: the `--device cpu|gpu|auto` choice shared by every stage that runs a model.
//!
//! ```
//! // GraphWave's exact mode diagonalises a graph's Laplacian: the path a – b – c.
//! let laplacian = [1.0, -1.0, 0.0, -1.0, 2.0, -1.0, 0.0, -1.0, 1.0];
//! let (values, vectors) = tgrag_models::linalg::sym_eigen(3, &laplacian)?;
//! for (got, want) in values.iter().zip([0.0, 1.0, 3.0]) {
//!     assert!((got - want).abs() < 1e-12, "{got} vs {want}");
//! }
//! // The first vector is constant (the connected graph's null space), of unit length.
//! assert!(vectors[..3].iter().all(|v| (v.abs() - 1.0 / 3f64.sqrt()).abs() < 1e-12));
//! # Ok::<(), tgrag_models::ModelError>(())
//! ```

// A library reports through its return values and `Progress`, never by printing to stdout.
#![warn(clippy::print_stdout)]

pub mod device;
pub mod engine;
pub mod error;
pub mod gnn;
pub mod graphqa;
pub mod linalg;
pub mod lm;
pub mod minilm;
pub mod ops;
pub mod planner;
pub mod reranker;
pub mod simd;
pub mod tagger;
pub mod train;

#[cfg(test)]
mod divergence_tests;
#[cfg(test)]
mod gpu_tests;
#[cfg(test)]
mod layout_tests;
#[cfg(test)]
mod parity_case;

pub use device::DeviceChoice;
pub use error::ModelError;
