//! Profiling views of eager dispatch (see issue: viz).
