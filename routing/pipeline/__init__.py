"""What a worker runs for one job, one module per step, each importable on its own:

claim (:mod:`routing.jobs`) → plan (:mod:`~routing.pipeline.planning`) → serve
(:mod:`~routing.pipeline.serving`, with :mod:`~routing.pipeline.retry`) → guarded attempts
(:mod:`~routing.pipeline.attempts`, cut off by :mod:`~routing.pipeline.cancel`) → record
(:mod:`~routing.pipeline.recording`, :mod:`~routing.pipeline.records`).
:mod:`~routing.pipeline.router` runs the line for a non-streamed job,
:mod:`~routing.pipeline.streaming` for a streamed one. No step imports a later one
(``.importlinter``: routing-steps); the pipeline imports nothing of :mod:`routing.web` or
:mod:`routing.worker`.
"""
