//! Hostile-input cases of the hardening round two (issue 27): hub.

#[allow(unused_imports)]
use super::*;
