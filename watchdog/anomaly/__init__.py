"""The anomaly model: a learned normal per node that flags what the rules cannot name.

An isolation forest over per-GPU window features (see ``docs/model.md``). One role per
module: :mod:`.features` (windows -> features), :mod:`.baseline` (each GPU's own thermal
line), :mod:`.train` (fit and calibrate), :mod:`.score` (batched scoring, one sign
convention), :mod:`.persist` (the model file), :mod:`.explain` (words), :mod:`.stage` (the
one scoring stage of the agent and replay), :mod:`.gate` (which GPUs are judged, against
which normal: :mod:`.grace`, :mod:`.job`, :mod:`.alone`, :mod:`.consensus`,
:mod:`.phases`, :mod:`.relearn` over :mod:`.gate_state`, limits in :mod:`.gate_limits`),
:mod:`.runner` (persistence, suppression, incidents), :mod:`.handover` (one page per
problem), :mod:`.auto` (the daemon's self-baselining), :mod:`.offline` (replay and train).
"""
