//! A real redis server for tests (to be written).
