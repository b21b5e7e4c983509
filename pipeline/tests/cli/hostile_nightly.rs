//! Hostile-input cases of the hardening round two (issue 27): nightly.

#[allow(unused_imports)]
use super::*;
