//! The instruction-set level every runtime dispatch of the project runs at.
//!
//! The CPU engines choose their kernels at run time: pulp's [`pulp::Arch`] (the fused MiniLM
//! engine's passes, attention and the host engines' elementwise passes), `gemm`'s own kernel choice
//! and the bf16 / AMX products of `--products auto`. `TGRAG_SIMD` caps all of them at once, so that
//! an AVX-512 machine runs the AVX2 path, or the baseline one, on demand:
//!
//! | `TGRAG_SIMD` | pulp | gemm | bf16 / AMX products |
//! |---|---|---|---|
//! | `auto` (or unset) | the CPU's best | the CPU's best | where the CPU has them |
//! | `v4` | AVX-512 (an error without it) | AVX-512 | where the CPU has them |
//! | `v3` | AVX2 + FMA (an error without them) | AVX2 + FMA | never (f32 products) |
//! | `scalar` | baseline x86-64 | baseline | never |
//!
//! The level is read once per process. [`configure`] reads and checks it (the binary calls it before
//! any work, so that an unknown value or one this CPU lacks is a clear error); [`level`] and
//! [`arch`] are what the kernels ask.
//!
//! ```
//! use tgrag_models::simd::{self, Level};
//! // Whatever the machine and `TGRAG_SIMD`, the level in force is one the CPU has.
//! let level = simd::level();
//! assert!(level <= Level::detected());
//! // Every dispatch of the engines runs at that level.
//! assert_eq!(Level::of(simd::arch()), level);
//! ```

use std::sync::OnceLock;

/// The name of the environment variable.
pub const VAR: &str = "TGRAG_SIMD";

/// A dispatch level (pulp's level names), ordered from the least to the most capable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Baseline x86-64 (SSE2): no AVX, no FMA.
    Scalar,
    /// x86-64-v3: AVX2 and FMA.
    V3,
    /// x86-64-v4: AVX-512 (F, BW, CD, DQ, VL).
    V4,
}

/// `TGRAG_SIMD` holds a value that is not a level, or a level this CPU lacks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{VAR}={value}: {reason}")]
pub struct LevelError {
    /// The value as given.
    pub value: String,
    /// Why it cannot be used, and what can.
    pub reason: String,
}

impl Level {
    /// Every level, least capable first.
    pub const ALL: [Level; 3] = [Level::Scalar, Level::V3, Level::V4];

    /// The name `TGRAG_SIMD` takes.
    pub fn name(self) -> &'static str {
        match self {
            Level::Scalar => "scalar",
            Level::V3 => "v3",
            Level::V4 => "v4",
        }
    }

    /// The best level this CPU has.
    pub fn detected() -> Level {
        Level::of(pulp::Arch::new())
    }

    /// The level a pulp dispatcher runs at.
    pub fn of(arch: pulp::Arch) -> Level {
        match arch {
            #[cfg(target_arch = "x86_64")]
            pulp::Arch::V4(_) => Level::V4,
            #[cfg(target_arch = "x86_64")]
            pulp::Arch::V3(_) => Level::V3,
            _ => Level::Scalar,
        }
    }

    /// A pulp dispatcher at this level: the CPU's own best where it is lower (never a level the CPU
    /// lacks).
    pub fn arch(self) -> pulp::Arch {
        #[cfg(target_arch = "x86_64")]
        {
            match self.min(Level::detected()) {
                Level::V4 => pulp::Arch::new(),
                Level::V3 => pulp::x86::V3::try_new().map_or(pulp::Arch::Scalar, pulp::Arch::V3),
                Level::Scalar => pulp::Arch::Scalar,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            pulp::Arch::new()
        }
    }

    /// Parses a `TGRAG_SIMD` value against what this CPU (`detected`) has: `auto` is `detected`.
    pub fn parse(value: &str, detected: Level) -> Result<Level, LevelError> {
        let err = |reason: String| LevelError { value: value.to_string(), reason };
        let wanted = match value.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => return Ok(detected),
            "v4" => Level::V4,
            "v3" => Level::V3,
            "scalar" => Level::Scalar,
            _ => return Err(err("not a level: use auto, v4, v3 or scalar".to_string())),
        };
        if wanted > detected {
            return Err(err(format!("this CPU's best level is {} (use auto, or a level at or below it)", detected.name())));
        }
        Ok(wanted)
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

static LEVEL: OnceLock<Result<Level, LevelError>> = OnceLock::new();

fn read() -> &'static Result<Level, LevelError> {
    LEVEL.get_or_init(|| {
        let detected = Level::detected();
        let level = match std::env::var(VAR) {
            Ok(value) => Level::parse(&value, detected),
            Err(std::env::VarError::NotPresent) => Ok(detected),
            Err(std::env::VarError::NotUnicode(v)) => {
                Err(LevelError { value: v.to_string_lossy().into_owned(), reason: "not a level: use auto, v4, v3 or scalar".into() })
            }
        };
        // gemm picks its kernels under the same cap (vendor/gemm-common).
        let cap = match level.as_ref().map_or(detected, |l| *l) {
            Level::Scalar => gemm_common::level::SCALAR,
            Level::V3 => gemm_common::level::V3,
            Level::V4 => gemm_common::level::V4,
        };
        gemm_common::level::set_max(cap);
        level
    })
}

/// Reads and checks `TGRAG_SIMD` (once per process) and applies it to every dispatch: the level in
/// force, or why the value cannot be used. Programs call it before any work.
pub fn configure() -> Result<Level, LevelError> {
    read().clone()
}

/// The level in force: `TGRAG_SIMD`'s, or the CPU's best when it is unset (or invalid: the binary
/// refuses an invalid value in [`configure`] before anything runs).
pub fn level() -> Level {
    match read() {
        Ok(level) => *level,
        Err(_) => Level::detected(),
    }
}

/// pulp's dispatcher at the level in force: every `WithSimd` pass of the engines goes through it
/// (made once: a pass asks for it on every call).
pub fn arch() -> pulp::Arch {
    static ARCH: OnceLock<pulp::Arch> = OnceLock::new();
    *ARCH.get_or_init(|| level().arch())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values are parsed case-insensitively against the detected level; a level above it and an
    /// unknown name are refused with the value in the message.
    #[test]
    fn levels_parse_against_what_the_cpu_has() {
        assert_eq!(Level::parse("auto", Level::V3), Ok(Level::V3));
        assert_eq!(Level::parse("", Level::V4), Ok(Level::V4));
        assert_eq!(Level::parse("V3", Level::V4), Ok(Level::V3));
        assert_eq!(Level::parse("scalar", Level::V3), Ok(Level::Scalar));
        let above = Level::parse("v4", Level::V3).unwrap_err();
        assert!(above.to_string().contains("TGRAG_SIMD=v4") && above.to_string().contains("best level is v3"), "{above}");
        let unknown = Level::parse("avx2", Level::V4).unwrap_err();
        assert!(unknown.to_string().contains("not a level"), "{unknown}");
    }

    /// Each level's dispatcher runs at that level, capped by the CPU's own.
    #[test]
    fn dispatchers_run_at_their_level() {
        for level in Level::ALL {
            assert_eq!(Level::of(level.arch()), level.min(Level::detected()));
        }
    }
}
