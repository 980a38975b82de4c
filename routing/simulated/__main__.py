"""``python -m routing.simulated``: the simulated upstreams as a process (``make upstreams``, the
demo command, the benchmarks)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

from .errors import mask_key
from .server import FakeUpstreams


def main(argv: list[str] | None = None) -> int:
    """``python -m routing.simulated --port 8900 [--host 127.0.0.1] [--scenarios FILE]
    [--keys-json '{"openai": "sk-..."}'] [--encrypted-reasoning include|always|never]``.

    ``--scenarios`` is a JSON file ``{"model": {scenario knobs}, ...}``; without it every model of
    the seeded catalogue (:func:`routing.catalogue.endpoint_seeds`) answers with the default knobs.
    Blocks until Ctrl-C.
    """
    parser = argparse.ArgumentParser(
        prog="python -m routing.simulated",
        description="Simulated LLM upstreams speaking the real provider wire formats.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8900)
    parser.add_argument("--scenarios", help="JSON file: {model: {knob: value}}")
    parser.add_argument(
        "--keys-json", help='JSON: {"openai": "...", "azure": "...", "anthropic": "...", "native": "..."}'
    )
    parser.add_argument("--encrypted-reasoning", default="include", choices=["include", "always", "never"])
    args = parser.parse_args(argv)
    from routing.catalogue import endpoint_seeds  # pure Python, no Django

    # without --scenarios: every model the seeded catalogue names (seed_catalogue
    # --simulated-base-url), with the default knobs
    scenarios = {seed.upstream_model: {} for seed in endpoint_seeds()}
    if args.scenarios:
        with open(args.scenarios, encoding="utf-8") as fh:
            scenarios = json.load(fh)
    # Keys from the environment keep them out of `ps`; --keys-json remains for quick manual runs.
    keys_json = args.keys_json or os.environ.get("FAKE_UPSTREAM_KEYS_JSON")
    keys = json.loads(keys_json) if keys_json else None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    fake = FakeUpstreams(
        host=args.host,
        port=args.port,
        api_keys=keys,
        scenarios=scenarios,
        encrypted_reasoning=args.encrypted_reasoning,
    )
    url = fake.start()
    print(f"Fake upstreams on {url}", file=sys.stderr)
    print(
        f"  OpenAI/Avocado chat:  {url}/v1/chat/completions   key {[mask_key(k) for k in sorted(fake.keys('openai'))]}",
        file=sys.stderr,
    )
    print(f"  OpenAI responses:     {url}/v1/responses", file=sys.stderr)
    print(
        f"  Azure (api-version):  azure_endpoint={url}  key {[mask_key(k) for k in sorted(fake.keys('azure'))]}",
        file=sys.stderr,
    )
    print(f"  Azure (v1):           base_url={url}/openai/v1/", file=sys.stderr)
    print(
        f"  Anthropic:            base_url={url}   key {[mask_key(k) for k in sorted(fake.keys('anthropic'))]}",
        file=sys.stderr,
    )
    print(f"  Control:              {url}/_fake/scenarios | /_fake/calls | /_fake/reset", file=sys.stderr)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        fake.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
