//! A real mqtt server for tests (to be written).
