"""Hot-swap deploys of an agent Clear runs: release directories, an atomic `current` symlink, activators, health
probes and verified rollback. DB-free; the evolution job records what these functions return. See README.md."""

from evolution.deploy.activators import Activator, KubernetesActivator, ProcessActivator, SystemdActivator
from evolution.deploy.commands import (
    CommandOutcome,
    CommandRunner,
    command_argv,
    sandbox_command_runner,
    subprocess_command_runner,
)
from evolution.deploy.config import HotSwapConfig, HotSwapPlan, hot_swap_config_validate
from evolution.deploy.errors import (
    ActivatorError,
    DeployBusy,
    DeployError,
    DeployInvalid,
    DeployStateCorrupt,
    ReleaseExists,
    ReleaseNotFound,
    StageFailed,
)
from evolution.deploy.health import (
    CommandProbe,
    HealthReport,
    HealthRound,
    HeartbeatFileProbe,
    HttpProbe,
    Probe,
    ProbeReport,
    ProbeResult,
    ProcessAliveProbe,
    health_watch,
    probes_run,
)
from evolution.deploy.promote import (
    HealthPolicy,
    PromotionOutcome,
    PromotionReason,
    PromotionResult,
    hot_swap_promote,
    hot_swap_recover,
    hot_swap_rollback,
)
from evolution.deploy.releases import (
    release_current_get,
    release_gc,
    release_mark_healthy,
    release_mark_status,
    release_preflight,
    release_promotion_begin,
    release_promotion_end,
    release_rollback,
    release_stage,
    release_state_get,
    release_swap,
)
from evolution.deploy.state import (
    PendingPromotion,
    ReleaseInfo,
    ReleaseLayout,
    ReleaseState,
    SwapRecord,
    release_layout,
    release_lock,
)

__all__ = [
    "Activator", "ActivatorError", "CommandOutcome", "CommandProbe", "CommandRunner", "DeployBusy", "DeployError",
    "DeployInvalid", "DeployStateCorrupt", "HealthPolicy", "HealthReport", "HealthRound", "HeartbeatFileProbe",
    "HotSwapConfig", "HotSwapPlan", "HttpProbe", "KubernetesActivator", "PendingPromotion", "Probe", "ProbeReport",
    "ProbeResult", "ProcessActivator", "ProcessAliveProbe", "PromotionOutcome", "PromotionReason",
    "PromotionResult", "ReleaseExists", "ReleaseInfo", "ReleaseLayout", "ReleaseNotFound", "ReleaseState",
    "StageFailed", "SwapRecord", "SystemdActivator", "command_argv", "health_watch", "hot_swap_config_validate",
    "hot_swap_promote", "hot_swap_recover", "hot_swap_rollback", "probes_run", "release_current_get", "release_gc",
    "release_layout", "release_lock", "release_mark_healthy", "release_mark_status", "release_preflight",
    "release_promotion_begin", "release_promotion_end", "release_rollback", "release_stage", "release_state_get",
    "release_swap", "sandbox_command_runner", "subprocess_command_runner",
]
