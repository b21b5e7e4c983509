//! Neural models of tgrag, written in burn and generic over the device (the Flex CPU backend
//! everywhere, wgpu where a GPU is present).
//!
//! * [`minilm`]: all-MiniLM-L6-v2 sentence embeddings (BERT, 6 layers, 384 dims), weights read
//!   strictly from `model.safetensors`, word pieces from `tokenizer.json`.
//! * [`linalg`]: f64 matrix product and symmetric eigendecomposition (GraphWave's exact mode).
//! * [`device`]: the `--device cpu|gpu|auto` choice shared by every stage that runs a model.

pub mod device;
pub mod error;
pub mod gnn;
pub mod linalg;
pub mod minilm;
pub mod planner;
pub mod reranker;
pub mod tagger;

pub use device::DeviceChoice;
pub use error::ModelError;
