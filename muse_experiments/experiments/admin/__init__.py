"""The experiments app's admin. Django imports this package to register the ModelAdmins, which
is all importing it does: :mod:`.experiments` (experiments with their variants and QA pins,
lifecycle buttons, the assignment preview), :mod:`.layers` (layers and the global holdout),
:mod:`.records` (read-only phases, exposures, pins and audit entries), :mod:`.rollouts`
(read-only rollouts with their ramp history) and :mod:`.api_keys`."""

from . import api_keys, experiments, layers, records, rollouts, shadow  # noqa: F401 - importing registers them
