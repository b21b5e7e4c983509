//! Which burn device a model or a matrix product runs on.

use burn::tensor::{Device, DeviceKind};
use serde::{Deserialize, Serialize};

/// `cpu`: the host engines (and burn's Flex backend as the device they read and write burn models
/// on; compiled unoptimised, nothing heavy runs through it). `gpu`: burn's CUDA backend where
/// [`gpu_backend`] is CUDA, else burn-wgpu on the hardware adapter wgpu finds (Vulkan, Metal or
/// DX12), else on the default one (a software rasteriser such as Mesa's lavapipe where that is all
/// there is). `auto`: `gpu` when there is a CUDA device or wgpu lists a hardware adapter
/// (see [`hardware_adapter`]), else `cpu`, never a software rasteriser; `TGRAG_GPU=0` forces `cpu`,
/// and `TGRAG_GPU=1` cannot make `auto` take a software rasteriser either (see [`auto_choice`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeviceChoice {
    #[default]
    Cpu,
    Gpu,
    Auto,
}

/// Whether `dev` is the CPU (burn's flex backend): the host engines (hand-written backward passes
/// on host buffers) train there, burn's autodiff elsewhere.
pub fn host_engine(dev: &Device) -> bool {
    dev.clone().inner() == Device::flex()
}

impl DeviceChoice {
    /// Parse `cpu`, `gpu` or `auto`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "cpu" => Some(Self::Cpu),
            "gpu" => Some(Self::Gpu),
            "auto" => Some(Self::Auto),
            _ => None,
        }
    }

    /// `cpu` or `gpu` after resolving `auto`.
    pub fn resolved(self) -> Self {
        match self {
            Self::Auto => {
                auto_choice(std::env::var("TGRAG_GPU").ok().as_deref(), gpu_backend() == GpuBackend::Cuda || hardware_adapter().is_some())
            }
            other => other,
        }
    }

    /// The burn device: on a GPU, CUDA device 0 where [`gpu_backend`] is CUDA, else wgpu's
    /// hardware adapter when there is one, else wgpu's default adapter.
    pub fn device(self) -> Device {
        match self.resolved() {
            Self::Gpu => match gpu_backend() {
                GpuBackend::Cuda => cuda_device(),
                GpuBackend::Wgpu => Device::wgpu(hardware_adapter().map_or(DeviceKind::DefaultDevice, |a| a.device_kind.clone())),
            },
            _ => Device::flex(),
        }
    }

    /// What the choice runs on, in words (`cpu (flex)`, `gpu: NVIDIA H100 (Vulkan, driver 550.54)`).
    pub fn describe(self) -> String {
        match self.resolved() {
            Self::Gpu if gpu_backend() == GpuBackend::Cuda => "gpu: CUDA device 0 (burn's CUDA backend)".to_string(),
            Self::Gpu => match hardware_adapter() {
                Some(a) => format!("gpu: {} ({}, {} driver {})", a.name, a.backend, a.kind, a.driver),
                None => match software_adapter() {
                    Some(a) => format!("gpu: {} ({}, a software rasteriser: slow)", a.name, a.backend),
                    None => "gpu: wgpu's default adapter".to_string(),
                },
            },
            _ => "cpu (host engines)".to_string(),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Gpu => "gpu",
            Self::Auto => "auto",
        }
    }
}

/// The backend `--device gpu` runs on: burn's CUDA backend (builds with the `cuda` feature, where a
/// CUDA driver and device are found) or wgpu.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuBackend {
    Cuda,
    Wgpu,
}

/// The GPU backend of this process: `TGRAG_GPU_BACKEND=auto` (or unset) takes CUDA where this build
/// has it and a CUDA device is found, else wgpu; `cuda` or `wgpu` forces one. Read once per process;
/// [`configure`] refuses a value that cannot be honoured before any work starts (an unreadable
/// value reads as `auto` here).
pub fn gpu_backend() -> GpuBackend {
    static CHOSEN: std::sync::OnceLock<GpuBackend> = std::sync::OnceLock::new();
    *CHOSEN.get_or_init(|| {
        let env = std::env::var("TGRAG_GPU_BACKEND").ok();
        choose_backend(env.as_deref(), cfg!(feature = "cuda"), cuda_available).unwrap_or(GpuBackend::Wgpu)
    })
}

/// Checks `TGRAG_GPU_BACKEND` (as [`crate::simd::configure`] checks `TGRAG_SIMD`): an unknown value,
/// or `cuda` where this build has no CUDA backend or no CUDA driver and device are found, is an
/// error before any work. Probes CUDA only when `cuda` is asked for.
pub fn configure() -> std::result::Result<(), String> {
    let env = std::env::var("TGRAG_GPU_BACKEND").ok();
    choose_backend(env.as_deref(), cfg!(feature = "cuda"), cuda_available).map(|_| ())
}

/// The backend for a `TGRAG_GPU_BACKEND` value, whether the build has CUDA and (probed only when
/// it matters) whether a CUDA device is found.
fn choose_backend(value: Option<&str>, built: bool, found: impl Fn() -> bool) -> std::result::Result<GpuBackend, String> {
    match value.map(str::trim).unwrap_or("auto") {
        "" | "auto" => Ok(if built && found() { GpuBackend::Cuda } else { GpuBackend::Wgpu }),
        "wgpu" => Ok(GpuBackend::Wgpu),
        "cuda" if !built => {
            Err("TGRAG_GPU_BACKEND=cuda: this tgrag was built without CUDA (build it with `cargo build --features cuda`)".into())
        }
        "cuda" if !found() => Err("TGRAG_GPU_BACKEND=cuda: no CUDA driver (libcuda) or no CUDA device found".into()),
        "cuda" => Ok(GpuBackend::Cuda),
        other => Err(format!("TGRAG_GPU_BACKEND={other}: not a backend: use auto, cuda or wgpu")),
    }
}

/// Whether a CUDA driver library loads and lists at least one device (once per process).
#[cfg(feature = "cuda")]
#[allow(unsafe_code)]
fn cuda_available() -> bool {
    static FOUND: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FOUND.get_or_init(|| {
        // SAFETY: `is_culib_present` only tries to open the driver library by its known names
        // (dlopen) and reports whether one opened; it calls nothing in it. The driver's functions
        // below are called only once it is known to load (they would abort otherwise).
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return false;
        }
        cudarc::driver::result::init().is_ok() && cudarc::driver::result::device::get_count().is_ok_and(|n| n > 0)
    })
}

#[cfg(not(feature = "cuda"))]
fn cuda_available() -> bool {
    false
}

/// CUDA device 0 on burn's CUDA backend.
#[cfg(feature = "cuda")]
fn cuda_device() -> Device {
    Device::cuda(0)
}

/// Without the `cuda` feature [`gpu_backend`] is never CUDA; wgpu's default adapter stands in.
#[cfg(not(feature = "cuda"))]
fn cuda_device() -> Device {
    Device::wgpu(DeviceKind::DefaultDevice)
}

/// What `auto` resolves to, given `TGRAG_GPU` and whether wgpu lists a hardware adapter: `cpu` when
/// `TGRAG_GPU=0`; otherwise `gpu` exactly when there is a hardware adapter. `TGRAG_GPU=1` does not
/// override that: a software rasteriser (llvmpipe, lavapipe) is slower than the CPU backend, so
/// `auto` never takes one (`--device gpu` still does, on request).
pub fn auto_choice(tgrag_gpu: Option<&str>, hardware: bool) -> DeviceChoice {
    match tgrag_gpu {
        Some("0") => DeviceChoice::Cpu,
        _ if hardware => DeviceChoice::Gpu,
        _ => DeviceChoice::Cpu,
    }
}

/// Adapter names of software rasterisers, lower case: Mesa's llvmpipe, lavapipe and softpipe,
/// Google's SwiftShader, Microsoft's WARP. Some drivers (OpenGL through Mesa, WARP) report these as
/// "other" rather than as a CPU device, so the name decides too.
const SOFTWARE_NAMES: &[&str] = &["llvmpipe", "lavapipe", "softpipe", "swiftshader", "microsoft basic render"];

/// Whether an adapter is a software rasteriser: wgpu reports a CPU device, or its name is one.
fn is_software(cpu_device: bool, name: &str) -> bool {
    let name = name.to_lowercase();
    cpu_device || SOFTWARE_NAMES.iter().any(|s| name.contains(s))
}

/// The first hardware adapter of `list` (never one of [`is_software`]'s).
fn first_hardware(list: &[Adapter]) -> Option<&Adapter> {
    list.iter().find(|a| a.kind != "software")
}

/// A graphics adapter wgpu lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adapter {
    pub name: String,
    /// Driver name and version, as the driver reports them.
    pub driver: String,
    /// `discrete`, `integrated`, `virtual`, `other` or `software`.
    pub kind: &'static str,
    /// `Vulkan`, `Metal`, `Dx12` or `Gl`.
    pub backend: String,
    /// How burn addresses it.
    pub device_kind: DeviceKind,
}

/// Every adapter wgpu lists, in cubecl's API order (Vulkan, DX12, GL; Metal on macOS), listed once
/// per process. Creating the instances prints nothing of its own; see `pipeline`'s `main` for the
/// Wayland message some Vulkan layers print.
fn adapters() -> &'static [Adapter] {
    use burn::tensor::wgpu::wgpu;
    static ALL: std::sync::OnceLock<Vec<Adapter>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        let apis: &[wgpu::Backend] = if cfg!(target_os = "macos") {
            &[wgpu::Backend::Metal]
        } else {
            &[wgpu::Backend::Vulkan, wgpu::Backend::Dx12, wgpu::Backend::Gl]
        };
        let mut out = Vec::new();
        for &api in apis {
            let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
                backends: api.into(),
                ..wgpu::InstanceDescriptor::new_without_display_handle()
            });
            let infos: Vec<wgpu::AdapterInfo> =
                block_on(instance.enumerate_adapters(api.into())).iter().map(wgpu::Adapter::get_info).collect();
            for (pos, i) in infos.iter().enumerate() {
                let nth = infos[..pos].iter().filter(|j| j.device_type == i.device_type).count();
                let (kind, device_kind) = match i.device_type {
                    wgpu::DeviceType::DiscreteGpu => ("discrete", DeviceKind::DiscreteGpu(nth)),
                    wgpu::DeviceType::IntegratedGpu => ("integrated", DeviceKind::IntegratedGpu(nth)),
                    wgpu::DeviceType::VirtualGpu => ("virtual", DeviceKind::VirtualGpu(nth)),
                    wgpu::DeviceType::Cpu => ("software", DeviceKind::Cpu),
                    wgpu::DeviceType::Other => ("other", DeviceKind::DefaultDevice),
                };
                let kind = if is_software(i.device_type == wgpu::DeviceType::Cpu, &i.name) { "software" } else { kind };
                out.push(Adapter {
                    name: i.name.clone(),
                    driver: format!("{} {}", i.driver, i.driver_info).trim().to_string(),
                    kind,
                    backend: format!("{:?}", i.backend),
                    device_kind,
                });
            }
        }
        out
    })
}

/// The first hardware GPU wgpu lists (not a software rasteriser such as llvmpipe or lavapipe).
pub fn hardware_adapter() -> Option<&'static Adapter> {
    first_hardware(adapters())
}

/// The first software adapter wgpu lists (Mesa's lavapipe or llvmpipe), where there is one.
pub fn software_adapter() -> Option<&'static Adapter> {
    adapters().iter().find(|a| a.kind == "software")
}

/// Polls a future that native wgpu resolves at once (adapter enumeration).
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_backend_values_choose_cuda_only_where_built_and_found_and_refuse_the_rest() {
        let yes = || true;
        let no = || false;
        // auto: CUDA exactly where the build has it and a device is found.
        assert_eq!(choose_backend(None, true, yes), Ok(GpuBackend::Cuda));
        assert_eq!(choose_backend(Some("auto"), true, no), Ok(GpuBackend::Wgpu));
        assert_eq!(choose_backend(Some(""), false, yes), Ok(GpuBackend::Wgpu));
        assert_eq!(choose_backend(Some("wgpu"), true, yes), Ok(GpuBackend::Wgpu));
        assert_eq!(choose_backend(Some(" cuda "), true, yes), Ok(GpuBackend::Cuda));
        let without = choose_backend(Some("cuda"), false, yes).expect_err("no CUDA in the build");
        assert!(without.contains("built without CUDA") && without.contains("--features cuda"), "{without}");
        let missing = choose_backend(Some("cuda"), true, no).expect_err("no device");
        assert!(missing.contains("no CUDA device"), "{missing}");
        let unknown = choose_backend(Some("rocm"), true, yes).expect_err("unknown");
        assert!(unknown.contains("TGRAG_GPU_BACKEND=rocm") && unknown.contains("auto, cuda or wgpu"), "{unknown}");
        // The probe runs only when its answer matters.
        let probed = std::cell::Cell::new(false);
        let probe = || {
            probed.set(true);
            true
        };
        assert_eq!(choose_backend(Some("wgpu"), true, probe), Ok(GpuBackend::Wgpu));
        assert_eq!(choose_backend(Some("auto"), false, probe), Ok(GpuBackend::Wgpu));
        assert!(!probed.get());
        // This build and machine: no CUDA feature in the tests' build, or no CUDA device here.
        if !cfg!(feature = "cuda") {
            assert_eq!(gpu_backend(), GpuBackend::Wgpu);
        }
    }

    #[test]
    fn adapters_are_listed_and_a_software_rasteriser_is_never_taken_for_a_gpu() {
        for a in adapters() {
            eprintln!("adapter: {} ({}, {}, driver {})", a.name, a.backend, a.kind, a.driver);
        }
        assert!(hardware_adapter().is_none_or(|a| a.kind != "software"));
        assert!(software_adapter().is_none_or(|a| a.kind == "software"));
        // `auto` takes the GPU exactly when there is a hardware adapter (unless TGRAG_GPU forces it).
        if std::env::var_os("TGRAG_GPU").is_none() {
            assert_eq!(DeviceChoice::Auto.resolved() == DeviceChoice::Gpu, hardware_adapter().is_some());
        }
        assert_eq!(DeviceChoice::Cpu.describe(), "cpu (host engines)");
    }

    fn adapter(name: &str, kind: &'static str, device_kind: DeviceKind) -> Adapter {
        Adapter { name: name.into(), driver: "Mesa 24.0".into(), kind, backend: "Vulkan".into(), device_kind }
    }

    #[test]
    fn auto_never_chooses_a_software_rasteriser_even_with_tgrag_gpu_1() {
        // Only a software rasteriser: `auto` stays on the CPU whatever TGRAG_GPU says.
        for env in [None, Some("1"), Some("0"), Some("yes")] {
            assert_eq!(auto_choice(env, false), DeviceChoice::Cpu, "TGRAG_GPU={env:?}, no hardware adapter");
        }
        // A hardware adapter: the GPU, unless TGRAG_GPU=0.
        assert_eq!(auto_choice(None, true), DeviceChoice::Gpu);
        assert_eq!(auto_choice(Some("1"), true), DeviceChoice::Gpu);
        assert_eq!(auto_choice(Some("0"), true), DeviceChoice::Cpu);
        // Software rasterisers are told by device type or by name (GL's llvmpipe may report "other").
        assert!(is_software(true, "whatever"));
        for name in ["llvmpipe (LLVM 17.0.6, 256 bits)", "lavapipe", "SwiftShader Device (Subzero)", "Microsoft Basic Render Driver"] {
            assert!(is_software(false, name), "{name}");
        }
        assert!(!is_software(false, "NVIDIA H100 80GB HBM3"));
        // The hardware adapter is the first that is not software, wherever it is listed.
        let soft = adapter("llvmpipe (LLVM 17.0.6, 256 bits)", "software", DeviceKind::Cpu);
        let gpu = adapter("NVIDIA H100", "discrete", DeviceKind::DiscreteGpu(0));
        assert_eq!(first_hardware(&[soft.clone(), gpu.clone()]), Some(&gpu));
        assert_eq!(first_hardware(std::slice::from_ref(&soft)), None);
        assert_eq!(first_hardware(&[]), None);
    }
}
