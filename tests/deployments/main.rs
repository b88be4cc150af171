//! relock on the deployments it supports: Redis Cluster, Sentinel, replicas, TLS, reconnects and a
//! server that goes away.

#[path = "../common/mod.rs"]
mod common;

mod cluster;
mod dead_server;
mod election_failover;
mod functions;
mod reconnect;
mod replica_sync;
mod sentinel;
mod synchronizers;
mod tls;
mod topology;
