"""The anomaly model: an isolation forest over per-GPU window features that learns a
node's normal and flags what the rules cannot name (see ``docs/model.md``).

One role per module: :mod:`.features` (windows -> features), :mod:`.train` (fit and
calibrate), :mod:`.score` (batched scoring, one sign convention), :mod:`.persist`
(the model file), :mod:`.explain` (words), :mod:`.runner` (persistence, suppression,
incidents), :mod:`.auto` (the daemon's self-baselining)."""
