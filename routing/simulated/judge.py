"""The simulated upstreams as a shadow test's judge: a prompt holding :data:`JUDGE_MARKER`
(``routing.shadow.judge``) is answered with a verdict instead of a reply."""

from __future__ import annotations

import hashlib
import re

#: Marks a shadow test's judge prompt (``routing.shadow.judge.JUDGE_MARKER``).
JUDGE_MARKER = "[muse-shadow-judge]"
_QUALITY = re.compile(r"<answer_([ab])>.*?\[quality=([0-9.]+)\].*?</answer_\1>", re.S)
_MALFORMED_VERDICTS = ("I prefer the first answer.", "VERDICT: A or B", "verdict: a", "VERDICT: C", "")


def judge_verdict(prompt: str, malformed_share: float) -> str:
    """A judge's answer to ``prompt``, deterministic in it: malformed with probability
    ``malformed_share``; else a tie with probability 0.1, else ``A`` with probability
    ``0.45 + (quality_a - quality_b)`` (clipped to [0.05, 0.95]) of the non-ties."""
    u = int(hashlib.sha256(prompt.encode()).hexdigest()[:12], 16) / float(16**12)
    if u < malformed_share:
        return _MALFORMED_VERDICTS[int(u * 1000) % len(_MALFORMED_VERDICTS)]
    v = (u - malformed_share) / max(1.0 - malformed_share, 1e-9)
    if v < 0.1:
        return "VERDICT: TIE"
    q = {k: float(x) for k, x in _QUALITY.findall(prompt)}
    p_a = min(max(0.45 + q.get("a", 0.5) - q.get("b", 0.5), 0.05), 0.95)
    return "VERDICT: A" if (v - 0.1) / 0.9 < p_a else "VERDICT: B"
