//! Which burn device a model or a matrix product runs on.

use burn::tensor::{Device, DeviceKind};
use serde::{Deserialize, Serialize};

/// `cpu`: burn's Flex backend (pure Rust, multi-threaded gemm). `gpu`: burn-wgpu on the default
/// adapter (Vulkan, Metal or DX12). `auto`: `gpu` when the `TGRAG_GPU` environment variable is `1`,
/// else `cpu` — probing for an adapter would initialise wgpu (seconds, and a panic inside wgpu on
/// machines without one), which an offline batch tool should not do behind the user's back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum DeviceChoice {
    #[default]
    Cpu,
    Gpu,
    Auto,
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
            Self::Auto if std::env::var("TGRAG_GPU").is_ok_and(|v| v == "1") => Self::Gpu,
            Self::Auto => Self::Cpu,
            other => other,
        }
    }

    /// The burn device.
    pub fn device(self) -> Device {
        match self.resolved() {
            Self::Gpu => Device::wgpu(DeviceKind::DefaultDevice),
            _ => Device::flex(),
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
