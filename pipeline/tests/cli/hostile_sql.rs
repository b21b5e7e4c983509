//! Hostile-input cases of the hardening round two (issue 27): sql.

#[allow(unused_imports)]
use super::*;
