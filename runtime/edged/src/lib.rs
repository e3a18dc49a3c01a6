//! EdgeD: the node's pods on a Docker engine, driven by KubeEdge's metamanager protocol
//! (`spec/kubeedge-compat.md` §6).
//!
//! Its parts, each tested against a real engine where it touches one:
//! - [`pod`]: the Pod subset edged runs, and the checks that turn a bad spec into a status;
//! - [`quantity`]: memory and CPU limits as the engine wants them;
//! - [`engine`]: images and labelled containers through bollard;
//! - [`plan`]: a pod's container as the engine creates it (command, env, limits, binds);
//! - [`sandbox`]: a pod's sandbox ("pause") container, owner of its network namespace;
//! - [`dns`] and [`etc_hosts`]: the pod's resolv.conf, hostname and hosts file as kubelet
//!   makes them;
//! - [`objects`] and [`projected`]: ConfigMaps and Secrets through metamanager, as volumes
//!   and environment;
//! - [`security_context`]: pod and container `securityContext` as Docker settings;
//! - [`pull_secrets`]: `imagePullSecrets` as registry credentials for a pull;
//! - [`probe`]: liveness, readiness and startup probes (exec, httpGet, tcpSocket);
//! - [`status`]: Kubernetes' pod status and the `podpatch` KubeEdge v1.12+ sends;
//! - [`node`]: node registration, status and lease through metamanager;
//! - [`static_pods`]: pods from manifest files on the node;
//! - [`wasm_pods`]: pods whose containers are modules in the node's Wasm host;
//! - [`module_fetch`]: their module files from HTTPS URLs pinned by SHA-256, cached;
//! - [`gc`], [`gc_pass`], [`disk`]: kubelet's container and image garbage collection;
//! - [`module`]: the `edged` module that converges the engine on the stored pods.

#![warn(missing_docs)]

pub mod admission;
pub mod ctl;
pub mod disk;
pub mod dns;
pub mod engine;
pub mod etc_hosts;
pub mod events;
pub mod eviction;
pub mod gc;
pub mod gc_pass;
pub mod hold_upgrade;
pub mod log_rotation;
pub mod module;
pub mod module_fetch;
pub mod name_plan;
pub mod node;
pub mod objects;
pub mod plan;
pub mod pod;
pub mod probe;
pub mod projected;
pub mod projected_volume;
pub mod pull_secrets;
pub mod quantity;
pub mod sandbox;
pub mod security_context;
pub mod server;
pub mod static_pods;
pub mod stats;
pub mod status;
pub mod subpath;
pub mod wasm_pods;

pub use module::{Edged, EdgedSettings};
