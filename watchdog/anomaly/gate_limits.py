"""The gate's tuned limits, in one place: what each means, and the measurement behind it.

The gate (:mod:`watchdog.anomaly.gate`) decides, window by window, which GPUs the model
judges and against which normal; each of its decisions is a module of functions
(:mod:`.grace`, :mod:`.job`, :mod:`.consensus`, :mod:`.alone`, :mod:`.phases`,
:mod:`.relearn`) reading these limits. Times are seconds of data time, powers fractions
of the GPU's power limit, temperatures C. "The job stream" is ``bench/model_jobs.py``
(simulated nodes that change jobs every 2-8 h); "real-wandb" names a run of
``../shared/real-wandb``.
"""

from __future__ import annotations

# --- grace: when a busy GPU is not judged (grace.py) ----------------------------------
IDLE_GAP_S = 300.0  # an idle spell this long ends in a warm-up; a shorter one is a checkpoint
CKPT_GRACE_S = 60.0  # not judged for this long after a checkpoint: a fault 10 s after a
# 60 s checkpoint pages within 120 s of its start
WARM_MIN_S = 120.0  # a start-up, warm-up or workload change lasts at least this long
RECOVERY_MIN_S = 60.0  # after a rule's engagement ends: at least this long
GRACE_MAX_S = 300.0  # a grace never lasts longer than this (5 min)
SETTLED_C_PER_MIN = 1.0  # a GPU whose temperature trend is within this has settled
START_UP = "start-up"  # the grace of a GPU's first busy window

# --- thermal lag: temperature following a power step (grace.py) -----------------------
# the features a GPU's temperature lagging behind a power step moves (read as normal)
LAG_FEATURES = ("temp_mean", "temp_slope", "peer_temp", "peer_temp_slope")
LAG_S = 180.0  # a power step this recent (3 thermal time constants) still moves temperature
LAG_WINDOWS = 19  # windows of power kept for it (LAG_S at one window every 10 s)
LAG_STEP = 0.05  # a power change of this much is a step
LAG_C_PER_MIN = 0.5  # a temperature trend this fast towards a step is its lag

# --- the node's job: members, checkpoints (job.py) -------------------------------------
MEMBER_MEM = 0.1  # a GPU holding this share of its memory belongs to a job
# a GPU has peers when its job has this many GPUs at work; with two, their median is the
# midpoint and each departs from it by half their difference, the healthy GPU as much as
# the faulty one (real-wandb Aochong-Li: a throttled GPU's healthy peer paged), and two
# other users' GPUs holding the same memory (ghln1e4f) taught the model +-0.27 of the
# limit as a normal peer_power
PEERS_MIN = 3
# a member under this utilization (%, the window's mean) waits for the job (a rank writing,
# every rank paused); a member at work under the model's busy line does not: another
# job's GPU at 47-56 % (real-wandb ghln1e4f) held the node's job unjudged whenever it dipped
IDLE_UTIL = 10.0
SPIN_POWER = 0.3  # most working members under this power spin in a collective: the job waits

# --- node-wide consensus and a GPU's own evidence (consensus.py) -----------------------
CONSENSUS_WINDOWS = 6  # a departure held this many windows (60 s, a whole window) is a change
MEM_STEP = 0.03  # memory used moved by more than this share of the total: a new job (5 %
# let a 1-GPU job at 93 % after one at 88 % page as a slowdown: 2 false on the job stream)
UTIL_STEP = 25.0  # utilization moved by more than this many points: a new job
# ... and by more than this many times the level's usual distance from the GPU's normal:
# W&B's 30 s means of a real FSDP job's memory swing between 85 and 100 % (ghln1e4f), and a
# GPU at 65 % of its power was taken for a new job every other window
SPREAD_K = 3.0
NORMAL_ALPHA = 0.1  # weight of a new normal window in a GPU's reference (util, memory)
STAND_OUT_SCORE = 0.15  # a GPU over the threshold scores this much over its peers' median
# features that are a throttle the rules name (rules/throttle.yaml), not an unnamed fault
THROTTLE_FEATURES = frozenset(("frac_locked", "frac_power_cap", "frac_sync_boost",
                               "frac_thermal", "frac_hw_slowdown"))
# the thermal peer features: a power step its peers share moves them each at its own rate
THERMAL_PEERS = ("peer_temp", "peer_temp_slope", "peer_temp_drift")
# alone, power this much over its normal is a heavier phase, a new workload (unless it is
# slowing: a slowed GPU's heavy phase crossed it and was re-learned, job stream a100 seed 3)
HEAVIER_PHASE = 0.15

# --- a GPU alone slowing down: own_power (alone.py) ------------------------------------
# Drawing SLOW_FALL of its limit and SLOW_FRAC of that power less than the most it drew at
# the same activity in its work is slowing down: power at 65 % of a new job's own at the
# same utilization, memory and clocks on a 1-GPU node read normal in every other feature
# (0 of 6 found on the job stream before own_power)
SLOW_FALL = 0.15
SLOW_FRAC = 0.2
# ... and under the mean power of the judged-normal windows at that activity by this many
# times their spread: a real V100 alone at half utilization, sampled every 30 s, drew
# 0.47 +- 0.05 of its limit at one activity, at most 0.58 (real-wandb s7hjifgd), and
# windows at 0.36-0.41 paged 3 times as a slowdown
SLOW_NOISE_K = 3.0
ACTIVITY_ALPHA = 0.1  # weight of a new normal window in an activity's mean and spread
# an activity: these levels each within its tolerance (the feature's unit)
ACTIVITY = {"util_mean": 10.0, "mem_ratio": 0.03, "mem_util": 5.0, "sm_active": 5.0,
            "tensor_active": 5.0}
# one of these read: without memory-controller or GPM activity a job's lighter phase (less
# bandwidth, fewer tensor ops at the same utilization and memory used) looks the same
ACTIVE = ("mem_util", "sm_active", "tensor_active")
ACTIVITIES_KEPT = 32  # activities remembered per GPU
# a normal window within this share of the tolerances is that activity: a ramp window
# learned on the way otherwise held the steady level (job stream a100 1-GPU seed 1 learned
# a slowdown at 45.4 % memory activity as new, found after 407 s instead of 67 s)
SAME_ACTIVITY_REACH = 0.5

# --- phases of a GPU alone (phases.py) --------------------------------------------------
PHASE_TOL = 0.05  # windows this near a stay's first power hold its level
PHASE_MIN_S = 60.0  # a level held this long and left is a phase of the job (not a ramp)
PHASE_SLACK_S = 120.0  # a phase may last this much longer than its longest stay so far
PHASES_KEPT = 16  # phases (level, longest stay) remembered per GPU

# --- re-learning after a workload change (relearn.py) -----------------------------------
# a node re-learns once its GPUs' median temperature trend is within this: the last
# 1.5-1.0 C/min of a new job's warm-up take a minute (a fault 6 min into a new job was
# judged from ~7.5 min, median alert 133 s; 113 s with this), and the temperature's
# offset is then learned a degree or two short (never own_temp's)
RELEARN_C_PER_MIN = 1.5
SETTLE_WINDOWS = 9  # windows of each GPU the re-learning uses (the last 90 s at 10 s)
MIN_SETTLE_WINDOWS = 3  # steady windows (no grace, no checkpoint) each GPU needs
RELEARN_GIVE_UP_S = 1800.0  # no steady windows this long after a change: keep the old normal
RELEARN_FIT_SHARE = 0.8  # a normal fits when this share of the settled windows scores low
NORMALS_KEPT = 4  # normals remembered (the fitted model's own counts as one)
# A GPU's power fell this much against its peers while its job settled, at unchanged
# utilization and memory: its normal is its place before the fall (power at 65 % written
# 6 min into a new job was learned as the job's normal: missed on 3 of 6 8-GPU nodes)
SETTLE_FALL = 0.08
# never shifted: each GPU's own thermal line and the drift are physics, not the workload;
# a healthy GPU without throttle reasons runs at its maximum clock and its HBM at its own
# clock whatever the job (so a fault there is never learned as a new normal)
NEVER_SHIFTED = frozenset(("own_temp", "peer_temp_drift", "sm_clock_unexplained",
                           "mem_clock_frac", "peer_mem_clock", "peer_util_drops", "own_power"))
