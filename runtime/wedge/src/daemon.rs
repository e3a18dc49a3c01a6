//! `wedge run`: start the node, wait for a signal, stop it in order.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use wedge_core::Bus;
use wedge_core::config::{EdgeCoreConfig, LogFormat};
use wedge_core::health::Health;
use wedge_core::metrics::MetricsSource;
use wedge_core::module::{SupervisionSettings, Supervisor};
use wedge_core::store::{Store, StoreOptions};
use wedge_devicetwin::module::DeviceTwin;
use wedge_devicetwin::settings::DeviceTwinSettings;
use wedge_eventbus::{EventBus, EventBusSettings};
use wedge_metamanager::{MetaManager, MetaManagerSettings};

use crate::admin::{self, AdminState};
use crate::cli::{LogFormatArg, RunArgs};

/// The whole shutdown (modules, store flush, admin server) must fit in this.
const SHUTDOWN_BUDGET: Duration = Duration::from_millis(4500);

pub fn run(args: RunArgs) -> Result<()> {
    let started = Instant::now();
    // First of all, so every listener (and the broker's fd-derived connection cap) sees it.
    let raised = crate::rlimit::raise_nofile();
    let config = effective_config(&args)?;
    let log = crate::logging::init(config.wedge.log_format, &config.wedge.log_level)?;
    match raised {
        Ok(r) => tracing::info!(
            soft_before = r.before,
            soft = r.after,
            hard = r.hard,
            "open files limit (RLIMIT_NOFILE)"
        ),
        Err(e) => tracing::warn!("cannot raise the open files limit: {e}"),
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("wedge")
        .build()
        .context("cannot start the async runtime")?;
    let reload_config: Box<dyn Fn() -> Result<EdgeCoreConfig> + Send> =
        Box::new(move || effective_config(&args));
    runtime.block_on(run_node(config, started, log, reload_config))
}

/// Defaults or the config file, then the command-line overrides, validated together.
fn effective_config(args: &RunArgs) -> Result<EdgeCoreConfig> {
    let mut config =
        crate::config_cmd::node_config(args.config.as_deref(), args.data_dir.as_deref())?;
    if let Some(addr) = args.admin_addr {
        config.wedge.admin_addr = addr.to_string();
    }
    if let Some(format) = args.log_format {
        config.wedge.log_format = match format {
            LogFormatArg::Human => LogFormat::Human,
            LogFormatArg::Json => LogFormat::Json,
        };
    }
    config.validate().context("invalid configuration")?;
    crate::logging::check(&config.wedge.log_level).context("invalid configuration")?;
    Ok(config)
}

async fn run_node(
    config: EdgeCoreConfig,
    started: Instant,
    log: crate::logging::LogControl,
    reload_config: Box<dyn Fn() -> Result<EdgeCoreConfig> + Send>,
) -> Result<()> {
    // Watched before anything slow starts: SIGHUP's default action would kill the process.
    let mut signals = Signals::new()?;
    let node = config.node_name()?;
    // The data directory holds the database, tokens, sockets and compiled modules: created
    // 0700 before anything is written there, and refused (naming it) when others can write
    // into it.
    wedge_core::private_fs::ensure_private_dir(&config.data_dir()).context("wedge.dataDir")?;
    let admin_settings = admin_server_settings(&config)?;
    let db_path = config.database_path();
    tracing::info!(node = %node, database = %db_path.display(), "starting wedge {}", env!("CARGO_PKG_VERSION"));
    if let Some(line) = config.not_implemented_line() {
        // Once, so an operator starting Wedge on a KubeEdge file learns which settings do nothing.
        tracing::warn!("{line}");
    }

    let store = Store::open(
        &db_path,
        StoreOptions {
            max_batch: config.wedge.store.max_batch as usize,
            synchronous: config.wedge.store.synchronous,
            ..StoreOptions::default()
        },
    )?;
    let bus = Bus::new(config.wedge.bus.queue_capacity as usize);
    let health = Health::new();
    let mut supervisor = Supervisor::new(
        bus.clone(),
        health.clone(),
        SupervisionSettings::from_config(&config.wedge.supervision),
    );
    let mut sources: Vec<Arc<dyn MetricsSource>> = vec![
        Arc::new(health.clone()),
        Arc::new(bus.clone()),
        Arc::new(store.clone()),
    ];

    let modules = &config.modules;
    // edged's kubelet server in this process: edgeStream and MetaServer reach it through this.
    let (kubelet_link, kubelet_listener) = wedge_core::kubelet_link::kubelet_link(64);
    if modules.meta_manager.enable {
        store
            .migrate("metamanager", wedge_metamanager::MIGRATIONS)
            .await?;
        let meta = &modules.meta_manager;
        let settings = MetaManagerSettings {
            cloud_module: meta.context_send_module.clone(),
            remote_query_timeout: Duration::from_secs(meta.remote_query_timeout.max(1) as u64),
            ..MetaManagerSettings::default()
        };
        let metamanager = Arc::new(MetaManager::new(bus.clone(), store.clone(), settings));
        sources.push(metamanager.clone());
        supervisor.spawn(metamanager)?;
        if meta.meta_server.enable {
            tracing::warn!(
                address = %meta.meta_server.server,
                "modules.metaManager.metaServer: get, list, watch, writes, discovery and the \
                 keadm ctl extensions (unhold-upgrade, restart, logs, exec without a tty) are served \
                 on plain HTTP; TLS, authorization (featureGates.requireAuthorization, \
                 serviceAccount*, apiAudiences), dummyServer, device update and confirm-upgrade \
                 are not built"
            );
            let settings =
                wedge_metaserver::MetaServerSettings::from_config(&meta.meta_server, &node);
            let mut metaserver = wedge_metaserver::MetaServer::new(settings);
            if modules.edged.enable {
                metaserver = metaserver.with_kubelet_link(kubelet_link.clone());
            }
            let metaserver = Arc::new(metaserver);
            sources.push(metaserver.clone());
            supervisor.spawn(metaserver)?;
        }
    }
    // The Wasm host first: twin handlers and mappers must be loaded before devicetwin hands
    // out device definitions and reviews updates.
    let wasm = start_wasm_host(&config, &bus, &store).await?;
    sources.push(wasm.clone());
    let twin_hooks = Arc::new(wedge_mappers::WasmTwinHooks::new(wasm.clone()));

    if modules.event_bus.enable {
        let mut settings = EventBusSettings::from_config(&modules.event_bus, &node)
            .context("modules.eventBus")?
            .with_broker(&config.wedge.broker);
        let users_file = &config.wedge.mqtt.users_file;
        if !users_file.is_empty() {
            settings.users_file = Some(users_file.into());
            // Checked now, so a bad file stops the start with its reason instead of a module
            // that restarts.
            wedge_eventbus::access::AccessPolicy::build(
                settings.credentials.as_ref(),
                settings.users_file.as_deref(),
            )
            .context("wedge.mqtt.usersFile")?;
        }
        store
            .migrate(wedge_eventbus::COMPONENT, wedge_eventbus::MIGRATIONS)
            .await?;
        let eventbus = Arc::new(EventBus::new(store.clone(), settings));
        sources.push(eventbus.clone());
        supervisor.spawn(eventbus)?;
    }
    // ServiceBus (the router's rest ↔ servicebus rules) before edgehub: edgehub's first
    // connection broadcast must find it on the bus.
    if modules.service_bus.enable {
        store
            .migrate(wedge_servicebus::COMPONENT, wedge_servicebus::MIGRATIONS)
            .await?;
        let settings = wedge_servicebus::ServiceBusSettings::from_config(&modules.service_bus);
        let servicebus = Arc::new(wedge_servicebus::ServiceBus::new(store.clone(), settings));
        sources.push(servicebus.clone());
        supervisor.spawn(servicebus)?;
    }
    // The cloud outbox is opened before the modules that write into it: devicetwin stores its
    // cloud messages there in the same transaction as the twin change they report.
    let outbox = if modules.edge_hub.enable {
        store
            .migrate(
                wedge_core::outbox::COMPONENT,
                wedge_core::outbox::MIGRATIONS,
            )
            .await?;
        let outbox = wedge_core::outbox::Outbox::open_with(
            store.clone(),
            wedge_core::outbox::OutboxLimits::with_relayed_percent(
                config.wedge.outbox.max_messages as usize,
                config.wedge.outbox.relayed_percent,
            ),
        )
        .await
        .context("cannot open the cloud outbox")?;
        Some(outbox)
    } else {
        None
    };
    let mut device_twin = None;
    let mut dmi_module = None;
    if modules.device_twin.enable {
        store
            .migrate(
                wedge_devicetwin::storage::COMPONENT,
                wedge_devicetwin::storage::MIGRATIONS,
            )
            .await?;
        let mut settings = DeviceTwinSettings::new(node.clone());
        settings.limits = wedge_devicetwin::limits::Limits {
            max_twins_per_device: config.wedge.devices.max_twins_per_device as usize,
            max_devices: config.wedge.devices.max_devices as usize,
        };
        if !config.wedge.devices.dir.is_empty() {
            settings.devices_dir = Some(config.wedge.devices.dir.clone().into());
        }
        store
            .migrate(wedge_dmi::COMPONENT, wedge_dmi::MIGRATIONS)
            .await?;
        let socket = dmi_socket(&modules.device_twin.dmi_sock_path, &config.data_dir());
        let mut dmi_settings = wedge_dmi::DmiSettings::new(socket);
        let devices = &config.wedge.devices;
        dmi_settings.socket_group = devices.dmi_socket_group;
        if !devices.dmi_allowed_uids.is_empty() {
            dmi_settings.access.allowed_uids = Some(devices.dmi_allowed_uids.clone());
        }
        dmi_settings.access.reports_from_registering_process =
            devices.dmi_reports_from_registering_process;
        dmi_settings.limits.reports = wedge_dmi::Rate {
            per_second: devices.dmi_reports_per_second.into(),
            burst: devices.dmi_report_burst,
        };
        let dmi = Arc::new(wedge_dmi::Dmi::new(store.clone(), dmi_settings));
        let host = wasm.clone();
        dmi.set_protocol_owner(Arc::new(move |protocol: &str| {
            host.mapper_for_protocol(protocol)
                .map(|m| m.manifest().name.clone())
        }));
        sources.push(dmi.clone());
        dmi_module = Some(dmi.clone());
        supervisor.spawn(dmi.clone())?;
        let hooks = Arc::new(wedge_mappers::NodeTwinHooks {
            wasm: twin_hooks.clone(),
            dmi: Some(dmi),
        });
        let mut twin = DeviceTwin::new(store.clone(), settings, hooks);
        if let Some(outbox) = &outbox {
            twin = twin.with_outbox(outbox.clone());
        }
        let twin = Arc::new(twin);
        sources.push(twin.clone());
        device_twin = Some(twin.clone());
        supervisor.spawn(twin)?;
    }
    let mut cert_rotation = None;
    if let Some(outbox) = outbox {
        ensure_node_certificate(&modules.edge_hub, &node).await?;
        let settings = wedge_edgehub::link::LinkSettings::from_edgecore(&config, &node)
            .context("modules.edgeHub")?;
        // The hub writes the outbox's metrics too.
        let hub = Arc::new(wedge_edgehub::link::EdgeHub::new(settings, outbox));
        sources.push(hub.clone());
        supervisor.spawn(hub.clone())?;
        cert_rotation =
            crate::cert_rotation::RotationSettings::from_config(&modules.edge_hub, &node)
                .map(|settings| crate::cert_rotation::RotationTask::spawn(settings, hub));
    }
    // Turns true once edged has registered the Node (the tunnel waits for it).
    let mut node_registered = None;
    if modules.edged.enable {
        let mut settings = crate::edged_config::edged_settings(&config, &node);
        let ours = &config.wedge.edged;
        settings.static_pod_dir =
            (!ours.static_pod_dir.is_empty()).then(|| ours.static_pod_dir.clone().into());
        settings.wasm_runtime_class = ours.wasm_runtime_class.clone();
        settings.wasm_pod_module_namespaces = ours.wasm_pod_module_namespaces.clone();
        if !ours.module_cache_dir.is_empty() {
            settings.module_fetch.cache_dir = ours.module_cache_dir.clone().into();
        }
        if !ours.module_ca_file.is_empty() {
            let file = std::path::PathBuf::from(&ours.module_ca_file);
            // Read now, so a wrong file stops the start rather than the first pod that needs it.
            wedge_edged::module_fetch::load_ca_file(&file)
                .map_err(anyhow::Error::msg)
                .context("wedge.edged.moduleCaFile")?;
            settings.module_fetch.ca_file = Some(file);
        }
        let edged = Arc::new(
            wedge_edged::Edged::new(settings)
                .with_wasm(Arc::new(crate::wasm_pods::HostPods::new(wasm.clone())))
                .with_kubelet_link(kubelet_listener),
        );
        node_registered = edged.node_registered();
        sources.push(edged.clone());
        supervisor.spawn(edged)?;
    } else {
        // No kubelet server: the tunnel's requests fail at once, saying so.
        drop(kubelet_listener);
    }
    // The cloudstream tunnel: kubectl logs/exec/attach and metrics reads, replayed to
    // edged's kubelet server in this process (without edged, answered with why). It keeps
    // dialling until shutdown; a setting that can never work stops the start here, naming it.
    let stop_stream = tokio_util::sync::CancellationToken::new();
    let mut stream_task = None;
    if modules.edge_stream.enable {
        let mut tunnel =
            wedge_edgestream::TunnelConfig::from_edgecore(&config).context("modules.edgeStream")?;
        if tunnel.node_ip.is_none() {
            // CloudCore keys the session by the address the apiserver dials: the InternalIP
            // edged reports, which is the host's address when nodeIP is unset.
            tunnel.node_ip = wedge_edged::node::host::host_ipv4().and_then(|ip| ip.parse().ok());
        }
        tunnel.kubelet_link = Some(kubelet_link);
        let mut stream = wedge_edgestream::EdgeStream::new(tunnel).context("modules.edgeStream")?;
        if let Some(registered) = &node_registered {
            stream = stream.after(registered.clone());
        }
        sources.push(stream.stats());
        stream_task = Some(tokio::spawn(stream.run(stop_stream.clone())));
    }
    if modules.task_manager.enable {
        tracing::info!(
            module = "taskManager",
            "enabled in the config but not part of this build yet; skipped"
        );
    }

    let admin_metrics = Arc::new(crate::admin_server::AdminMetrics::default());
    sources.push(admin_metrics.clone());
    let stop_admin = tokio_util::sync::CancellationToken::new();
    let admin_router = admin::router(AdminState {
        node: node.clone(),
        health: health.clone(),
        sources,
        started,
        wasm: Some(wasm.clone()),
        twin_hooks: Some(twin_hooks.clone()),
        precompiler: Some(crate::precompile::Precompiler {
            cache_dir: config.data_dir().join("modules").join("cache"),
            max_instances: config.wedge.modules.max_instances,
        }),
        twin: device_twin,
        bus: bus.clone(),
        dmi: dmi_module,
        store: Some(store.clone()),
    });
    let admin_server = crate::admin_server::serve(
        admin_settings,
        admin_router,
        admin_metrics,
        stop_admin.clone(),
    )
    .await?;
    tokio::spawn(report_ready(health.clone(), started));

    let mut reloader = crate::reload::Reloader::new(reload_config, config, log, bus.clone());
    let signal = loop {
        match signals.next().await {
            Signal::Stop(name) => break name,
            Signal::Reload => reloader.reload().await,
        }
    };
    tracing::info!("{signal} received; stopping");
    let stopping = Instant::now();
    let orderly = tokio::time::timeout(SHUTDOWN_BUDGET, async {
        // Certificate rotation (it would only ask edgehub to redial), then the modules (each
        // finishes and acknowledges what it has committed), then the store's last commits,
        // then the admin API.
        if let Some(rotation) = cert_rotation {
            rotation.stop().await;
        }
        stop_stream.cancel();
        if let Some(task) = stream_task {
            let _ = task.await;
        }
        supervisor.shutdown().await;
        wasm.shutdown();
        if let Err(e) = store.barrier().await {
            tracing::error!("final store flush failed: {e}");
        }
        stop_admin.cancel();
        admin_server.finish().await;
    })
    .await;
    if orderly.is_err() {
        tracing::warn!("shutdown took longer than {SHUTDOWN_BUDGET:?}; exiting anyway");
    }
    // Dropping the last store handle joins the writer thread after its final checkpoint.
    drop(store);
    tracing::info!(
        elapsed_ms = stopping.elapsed().as_millis() as u64,
        "stopped"
    );
    Ok(())
}

/// Starts the Wasm host, reloads the modules deployed before, and deploys the configured
/// module directory.
async fn start_wasm_host(
    config: &EdgeCoreConfig,
    bus: &Bus,
    store: &Store,
) -> Result<Arc<wedge_wasm::WasmHost>> {
    let modules_dir = config.data_dir().join("modules");
    let engine = wedge_wasm::WasmEngine::new(
        &modules_dir.join("cache"),
        &wedge_wasm::EngineSettings {
            max_instances: config.wedge.modules.max_instances,
        },
    )?;
    store.migrate("wasm", wedge_wasm::MIGRATIONS).await?;
    let limits = &config.wedge.modules;
    let host = Arc::new(
        wedge_wasm::WasmHost::new(
            engine,
            crate::wasm_bridge::services(bus),
            &modules_dir,
            store.clone(),
        )
        .with_limits(wedge_wasm::GuestLimits {
            memory_budget_mib: limits.memory_budget_mib,
            log: wedge_wasm::LogPolicy {
                max_line_bytes: limits.log_line_bytes as usize,
                lines_per_second: limits.log_lines_per_second,
                burst: limits.log_burst,
            },
        }),
    );
    for (name, outcome) in host.load_persisted().await {
        if let Ok(status) = outcome {
            tracing::info!(module = %name, version = %status.version, "module reloaded");
        }
    }
    if !config.wedge.modules.dir.is_empty() {
        host.load_directory(std::path::Path::new(&config.wedge.modules.dir))
            .await;
    }
    crate::heap::release_free_memory();
    Ok(host)
}

/// Gets the node's certificate from the cloud with the join token when the configured one is
/// missing, unreadable, expired or not issued to `system:node:<node>`. A failure stops the
/// start with the reason (as edgecore does; a supervisor such as systemd retries), and never
/// overwrites the existing files.
async fn ensure_node_certificate(hub: &wedge_core::config::EdgeHub, node: &str) -> Result<()> {
    use wedge_edgehub::bootstrap::{bootstrap, read_cert_status};
    let paths = crate::cert_rotation::cert_paths(hub);
    let status = read_cert_status(&paths.cert, node, std::time::SystemTime::now());
    if !status.needs_bootstrap() {
        return Ok(());
    }
    if hub.token.is_empty() {
        anyhow::bail!(
            "modules.edgeHub: the node certificate {} cannot be used ({status:?}) and no token is \
             set to request one",
            hub.tls_cert_file
        );
    }
    tracing::info!(?status, server = %hub.http_server, "requesting a node certificate with the join token");
    bootstrap(&hub.http_server, &hub.token, node, &paths)
        .await
        .context("certificate bootstrap (modules.edgeHub.token)")?;
    tracing::info!(
        cert = %hub.tls_cert_file,
        "node certificate written; modules.edgeHub.token is no longer needed and can be removed"
    );
    Ok(())
}

/// Logs once when every module is running, with the time from process start.
async fn report_ready(health: Health, started: Instant) {
    if tokio::time::timeout(Duration::from_secs(60), health.wait_all_running())
        .await
        .is_ok()
    {
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        tracing::info!(start_to_ready_ms = format!("{ms:.1}"), "node ready");
        return;
    }
    tracing::warn!(
        "modules still not running after 60 s: {:?}",
        health.snapshot()
    );
}

/// The admin API's listeners from `wedge.adminAddr` and `wedge.admin`; the token file is
/// read (or created) only when TCP is on.
fn admin_server_settings(config: &EdgeCoreConfig) -> Result<crate::admin_server::ServerSettings> {
    let admin = &config.wedge.admin;
    let tcp = if config.wedge.admin_addr.is_empty() {
        None
    } else {
        Some(
            config
                .wedge
                .admin_addr
                .parse()
                .with_context(|| format!("wedge.adminAddr {:?}", config.wedge.admin_addr))?,
        )
    };
    let token = match tcp {
        Some(_) => Some(crate::admin_token::load_or_create(
            &config.admin_token_path(),
        )?),
        None => None,
    };
    Ok(crate::admin_server::ServerSettings {
        socket: config.admin_socket_path(),
        tcp,
        token,
        header_timeout: Duration::from_millis(admin.header_timeout_ms.into()),
        body_timeout: Duration::from_millis(admin.body_timeout_ms.into()),
        max_body: admin.max_body_bytes as usize,
        max_connections: admin.max_connections as usize,
    })
}

/// A signal the daemon acts on.
enum Signal {
    /// SIGTERM or SIGINT: stop in order.
    Stop(&'static str),
    /// SIGHUP: reload what can be reloaded.
    Reload,
}

/// The watched signals.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("cannot watch SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot watch SIGINT")?,
            hup: signal(SignalKind::hangup()).context("cannot watch SIGHUP")?,
        })
    }

    async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.term.recv() => Signal::Stop("SIGTERM"),
            _ = self.int.recv() => Signal::Stop("SIGINT"),
            _ = self.hup.recv() => Signal::Reload,
        }
    }
}

/// The DMI socket for `dmiSockPath` (see [`wedge_dmi::socket_path`]). Its directory is made
/// here; when that is not possible or not writable (KubeEdge's default `/etc/kubeedge` and a
/// node not run as root), `<dataDir>/dmi.sock` is used instead and said, so a node run from a
/// checkout still serves mappers.
fn dmi_socket(dmi_sock_path: &str, data_dir: &std::path::Path) -> std::path::PathBuf {
    let socket = wedge_dmi::socket_path(dmi_sock_path);
    let dir = socket.parent().unwrap_or(std::path::Path::new("/"));
    match wedge_setup::check::usable_dir(dir) {
        Ok(()) => socket,
        Err(e) => {
            let fallback = data_dir.join("dmi.sock");
            tracing::warn!(
                "modules.deviceTwin.dmiSockPath: cannot create sockets in {} ({e}); KubeEdge mappers \
                 reach this node on {} instead",
                dir.display(),
                fallback.display()
            );
            fallback
        }
    }
}
