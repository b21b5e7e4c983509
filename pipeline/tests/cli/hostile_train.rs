//! Hostile-input cases of the hardening round two (issue 27): train.

#[allow(unused_imports)]
use super::*;
