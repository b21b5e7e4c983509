//! `tgrag-bench`: the timed runs of `make bench` and `make bench-gpu`, kept out of the user's
//! `tgrag` binary. bench/bench.py calls `bench-gemm`, `bench-gnn`, `bench-lm`, `bench-products` and `bench-read` beside the
//! reference libraries (PyG, transformers + peft, polars); `make bench-gpu` calls `bench-gpu`.

mod bench_gemm;
mod bench_gnn;
mod bench_gpu;
mod bench_lm;
mod bench_products;
mod bench_read;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The timed runs of `make bench` and `make bench-gpu`.
#[derive(Debug, Parser)]
#[command(name = "tgrag-bench", version, about)]
struct Args {
    /// Folder for the runs' outputs (`bench-gpu`).
    #[arg(long, global = true, default_value = "outputs")]
    outputs: PathBuf,
    /// No progress bars.
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// GFLOP/s of the host engines' f32 products on one shape (`make bench`, next to torch.matmul).
    #[command(name = "bench-gemm")]
    Gemm(bench_gemm::BenchGemmArgs),
    /// Epoch times of the GNN trainings (`make bench`, next to PyG).
    #[command(name = "bench-gnn")]
    Gnn(bench_gnn::BenchGnnArgs),
    /// Time the project's own readers on one large input (`make bench`, next to polars).
    #[command(name = "bench-read")]
    Read(bench_read::BenchReadArgs),
    /// What a GPU gives against the CPU: MiniLM, every model family's training, a Prime-sized run
    /// end to end (`make bench-gpu`).
    #[command(name = "bench-gpu")]
    Gpu(bench_gpu::BenchGpuArgs),
    /// One training step of the language model with soft tokens (`make bench`, next to PyTorch).
    #[command(name = "bench-lm")]
    Lm(bench_lm::BenchLmArgs),
    /// MiniLM's fused engine against its linear-layer products alone, in GFLOP/s (`make bench`).
    #[command(name = "bench-products")]
    Products(bench_products::BenchProductsArgs),
}

fn main() -> ExitCode {
    // As `tgrag` starts: no wayland warning from the Vulkan loader, glibc's allocator tuned.
    tgrag_pipeline::quiet_wayland();
    tgrag_pipeline::tune_malloc();
    let args = Args::parse();
    if let Err(err) = tgrag_pipeline::check_environment() {
        eprintln!("error: {err}");
        return ExitCode::from(tgrag_schemas::Fault::Config.exit_code());
    }
    let done = match args.command {
        Command::Gemm(a) => bench_gemm::run(a),
        Command::Gnn(a) => bench_gnn::run(a),
        Command::Read(a) => bench_read::run(a),
        Command::Gpu(a) => bench_gpu::run(&args.outputs, a),
        Command::Lm(a) => bench_lm::run(a),
        Command::Products(a) => bench_products::run(a),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", tgrag_pipeline::fault::describe(&err));
            tgrag_pipeline::fault::exit_code(&err)
        }
    }
}
