"""Natural order of names with version numbers (issue 32: versions sorted as text, v1, v10, v2)."""

from __future__ import annotations

import pytest

from muse_experiments.infra.natural_sort import natural_key, natural_order


def test_version_numbers_sort_as_numbers():
    names = ["avocado-v10", "avocado-v2", "Avocado-v1", "muse-special", "avocado-v15", "avocado-v9"]
    assert sorted(names, key=natural_key) == [
        "Avocado-v1",
        "avocado-v2",
        "avocado-v9",
        "avocado-v10",
        "avocado-v15",
        "muse-special",
    ]
    assert sorted(["2.10", "2.9", "10"], key=natural_key) == ["2.9", "2.10", "10"]


@pytest.mark.django_db
def test_the_database_order_follows_the_shown_names():
    from routing.models import ModelEndpoint
    from tests.factories import seed_catalogue

    seed_catalogue()
    labels = dict(ModelEndpoint.objects.values_list("public_id", "version_label"))
    rows = (
        ModelEndpoint.objects.annotate(rank=natural_order("public_id", labels))
        .order_by("rank")
        .values_list("version_label", flat=True)
    )
    avocado = [label for label in rows if label.startswith("avocado-v")]
    assert avocado == [f"avocado-v{i}" for i in range(1, len(avocado) + 1)]
