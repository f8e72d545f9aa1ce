//! Placeholder for the wiring of watches, publishing and telemetry (replaced at merge).

pub async fn run(
    config: crate::config::Config,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let _ = config;
    shutdown.await;
    Ok(())
}
