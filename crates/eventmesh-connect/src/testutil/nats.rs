//! A real nats server for tests (to be written).
