//! What a watch's tasks are built from: one factory per watch, made from its plan and what the
//! term shares, and one `build` per target, which its supervisor calls again for a fresh task
//! after a crash.

use std::sync::Arc;

use tokio::sync::watch;

use super::plan::WatchPlan;
use super::shared::Shared;
use crate::backoff::Backoff;
use crate::budget::Budget;
use crate::config::{KubernetesConfig, NatsMode, PayloadMode};
use crate::filter::Filter;
use crate::kube::discovery::Discovery;
use crate::kube::ApiClient;
use crate::leader::TermClock;
use crate::mirror::metrics::MirrorMetrics;
use crate::mirror::{Mirror, MirrorBucket};
use crate::noise::NoiseControl;
use crate::publish::metrics::PublishMetrics;
use crate::publish::{MessageBuilder, MessageSpec, Nats, Outbox, OutboxParts};
use crate::scope::{self, Scope};
use crate::state::StateStore;
use crate::telemetry::target::TargetGauges;
use crate::watcher::machine::{Machine, Target};
use crate::watcher::metrics::WatchMetrics;
use crate::watcher::{ListSlots, OutletParts, WatchParts, WatchTask};

/// What the term chooses for a watch it starts.
#[derive(Clone)]
pub(super) struct WatchChoices {
    /// The matching namespaces of the watch's `namespace_selector`.
    pub(super) selected: Option<watch::Receiver<scope::Selected>>,
    /// The watch's filter (docs/filters.md).
    pub(super) filter: Option<Filter>,
    /// The mirror bucket and the watch's mirror metrics, when the watch is mirrored.
    pub(super) mirror: Option<(MirrorBucket, MirrorMetrics)>,
    pub(super) watch_metrics: WatchMetrics,
    pub(super) publish_metrics: PublishMetrics,
}

/// Everything the tasks of one watch are made of, owned, so that each target's supervisor can
/// build a fresh task after a crash (each holds its own copy: a task's message builder is not
/// shared between threads).
#[derive(Clone)]
pub(super) struct TaskFactory {
    plan: WatchPlan,
    kubernetes: KubernetesConfig,
    client: Arc<ApiClient>,
    /// Each build loads the target's saved state afresh: a restarted task resumes from the last
    /// checkpoint, which only ever holds what was published.
    state: StateStore,
    nats: Nats,
    budget: Budget,
    list_slots: ListSlots,
    term: TermClock,
    max_in_flight: usize,
    messages: MessageBuilder,
    noise: NoiseControl,
    /// Cluster-scoped objects have no namespace to choose by (`plan` warned): empty for them.
    exclude: Arc<[String]>,
    choices: WatchChoices,
}

impl TaskFactory {
    pub(super) fn new(shared: Shared<'_>, plan: &WatchPlan, mut choices: WatchChoices) -> Self {
        let (config, watch) = (shared.config, &*plan.watch);
        let exclude = match plan.resource.namespaced {
            true => watch.namespaces_exclude.clone().into(),
            false => {
                choices.selected = None;
                Arc::from([])
            }
        };
        let messages = MessageBuilder::new(MessageSpec {
            watch: watch.name.clone(),
            subject: watch.subject.clone(),
            prefix: watch.subject_prefix.clone(),
            cluster: watch.cluster.clone(),
            resource: plan.resource.clone(),
            payload: watch.payload,
            format: watch.format,
        });
        let max_in_flight = match &config.nats.mode {
            NatsMode::Core => 1,
            NatsMode::JetStream(js) => js.max_ack_inflight,
        };
        TaskFactory {
            plan: plan.clone(),
            kubernetes: config.kubernetes.clone(),
            client: shared.client.clone(),
            state: shared.state.clone(),
            nats: shared.nats.clone(),
            budget: shared.budget.clone(),
            list_slots: shared.list_slots.clone(),
            term: shared.term.clone(),
            max_in_flight,
            messages,
            noise: NoiseControl::new(&watch.noise),
            exclude,
            choices,
        }
    }

    /// The task of one target of the watch (`namespace: None`: all namespaces): its list+watch
    /// state machine, its outbox, its mirror writer and the messages it builds.
    pub(super) fn build(&self, namespace: Option<&str>, gauges: &TargetGauges) -> WatchTask {
        let watch = &*self.plan.watch;
        let choices = &self.choices;
        let target = Arc::new(target(&self.plan, &self.kubernetes, namespace));
        let machine = Machine::new(
            self.client.clone(),
            target.clone(),
            Backoff::new(self.kubernetes.backoff),
        )
        .with_budget(self.budget.clone())
        .with_list_slots(self.list_slots.clone())
        .with_served(choices.watch_metrics.sync.served().cloned());
        let outbox = Outbox::new(
            self.nats.clone(),
            OutboxParts {
                max_in_flight: self.max_in_flight,
                metrics: choices.publish_metrics.clone(),
                gauges: gauges.clone(),
                budget: self.budget.clone(),
                term: self.term.clone(),
            },
        );
        let mirror = choices.mirror.as_ref().map(|(bucket, metrics)| {
            let prefix = crate::mirror::key::watch_prefix(&watch.cluster, &self.plan.resource);
            Mirror::start(bucket, prefix, namespace, &watch.name, metrics.clone())
        });
        WatchTask::new(WatchParts {
            machine,
            outlet: OutletParts {
                outbox,
                mirror,
                messages: self.messages.clone(),
                events: watch.events.clone(),
                noise: self.noise.clone(),
                term: self.term.clone(),
            },
            noise: self.noise.clone(),
            filter: choices.filter.clone(),
            initial_state: watch.initial_state,
            metrics: choices.watch_metrics.clone(),
            saved: self.state.target(&watch.name, &target),
            gauges: gauges.clone(),
            scope: Scope::new(self.exclude.clone(), choices.selected.clone()),
        })
    }
}

/// What `plan`'s watch lists and watches in `namespace` (`None`: all namespaces).
pub(super) fn target(
    plan: &WatchPlan,
    kubernetes: &KubernetesConfig,
    namespace: Option<&str>,
) -> Target {
    let watch = &*plan.watch;
    Target {
        resource: plan.resource.clone(),
        namespace: namespace.map(str::to_owned),
        label_selector: watch.label_selector.clone(),
        field_selector: watch.field_selector.clone(),
        page_size: kubernetes.list_page_size,
        watch_timeout: kubernetes.watch_timeout,
        streaming_list: kubernetes.streaming_list,
        max_line_bytes: kubernetes.max_line_bytes,
        metadata_only: watch.payload == PayloadMode::Metadata,
        follow: Discovery::followed(&watch.resource, &plan.resource),
    }
}
