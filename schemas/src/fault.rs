//! Whose fault an error is, and the exit code `tgrag` gives for it. Every typed error of the
//! library crates says its [`Fault`] (`SchemaError::fault`, `DatasetError::fault`,
//! `ModelError::fault`, `StageError::fault`); the binary maps the first typed error of a failure's
//! chain to [`Fault::exit_code`]. The codes follow BSD's `sysexits.h`, so shell scripts and job
//! runners can tell "fix your data" from "fix your settings" from "report a bug".

use std::fmt;

/// Whose fault a failure is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The input data: a file the user gave breaks its contract (names the file, row and field),
    /// is malformed or truncated. Exit code 65 (`EX_DATAERR`).
    Input,
    /// The configuration: an option or setting out of range, an unknown name, a model folder that
    /// is missing or does not fit, a training that diverged under the chosen settings. Exit code
    /// 78 (`EX_CONFIG`).
    Config,
    /// The environment: the file system or the network (no space left, permission denied, a
    /// download that failed, a path that is someone else's). Exit code 74 (`EX_IOERR`).
    Environment,
    /// A bug in tgrag. Exit code 70 (`EX_SOFTWARE`).
    Internal,
}

impl Fault {
    /// The process exit code for this fault (`sysexits.h`).
    pub fn exit_code(self) -> u8 {
        match self {
            Fault::Input => 65,
            Fault::Config => 78,
            Fault::Environment => 74,
            Fault::Internal => 70,
        }
    }

    /// Whose fault a failed read or write is: a file that is not there, or whose bytes are not
    /// what they claim (invalid data, cut short), is the input's; anything else the operating
    /// system refused (no space, permission, a broken device) the environment's.
    pub fn of_io(kind: std::io::ErrorKind) -> Fault {
        use std::io::ErrorKind as K;
        match kind {
            K::NotFound | K::InvalidData | K::UnexpectedEof => Fault::Input,
            _ => Fault::Environment,
        }
    }

    /// Every fault, in exit-code order (for documentation and tests).
    pub const ALL: [Fault; 4] = [Fault::Input, Fault::Internal, Fault::Environment, Fault::Config];
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Fault::Input => "input data",
            Fault::Config => "configuration",
            Fault::Environment => "environment (file system or network)",
            Fault::Internal => "internal (a bug in tgrag)",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_damaged_file_is_the_inputs_fault_other_io_the_environments() {
        use std::io::ErrorKind as K;
        for k in [K::NotFound, K::InvalidData, K::UnexpectedEof] {
            assert_eq!(Fault::of_io(k), Fault::Input, "{k:?}");
        }
        for k in [K::PermissionDenied, K::StorageFull, K::Interrupted, K::ReadOnlyFilesystem] {
            assert_eq!(Fault::of_io(k), Fault::Environment, "{k:?}");
        }
    }

    #[test]
    fn codes_are_distinct_sysexits_and_clear_of_tgrags_own() {
        let codes: Vec<u8> = Fault::ALL.iter().map(|f| f.exit_code()).collect();
        let mut sorted = codes.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), Fault::ALL.len(), "{codes:?}");
        // sysexits.h: EX_DATAERR 65, EX_SOFTWARE 70, EX_IOERR 74, EX_CONFIG 78.
        assert_eq!(sorted, vec![65, 70, 74, 78]);
        // 0 success, 1 unclassified, 2 arguments (clap), 3 locked, 4 regression, 5 failed night,
        // 101 panic: none is reused.
        for reserved in [0u8, 1, 2, 3, 4, 5, 101] {
            assert!(!codes.contains(&reserved), "{reserved}");
        }
    }
}
