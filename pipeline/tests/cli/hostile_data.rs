//! Hostile-input cases of the hardening round two (issue 27): data.

#[allow(unused_imports)]
use super::*;
