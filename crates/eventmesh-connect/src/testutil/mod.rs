//! Real servers for connector tests, each started on free ports with a
//! temporary data directory and killed when dropped.

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

pub mod mqtt;
pub mod nats;
pub mod postgres;
pub mod redis;
