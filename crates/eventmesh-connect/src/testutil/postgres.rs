//! A real postgres server for tests (to be written).
