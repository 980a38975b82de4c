"""GrowthBook SDK-compatible assignment primitives (pure Python, stdlib only).

Everything here re-implements, function for function, the deterministic parts of
the GrowthBook SDKs so that a unit bucketed by Muse lands in exactly the bucket
GrowthBook (and any GrowthBook SDK) would put it in:

* hashing, bucket ranges, variation choice, namespaces:
  ``packages/sdk-js/src/util.ts`` (JS SDK) and ``growthbook/core.py``
  (``growthbook/growthbook-python``);
* targeting conditions: ``packages/sdk-js/src/mongrule.ts`` (JS SDK) and the
  ``evalCondition`` family of ``growthbook/core.py``.

Conformance is checked against GrowthBook's published SDK test cases
(``packages/sdk-js/test/cases.json``), vendored in ``tests/data/growthbook_cases.json``.

Non-ASCII ids
-------------
GrowthBook's reference SDK is JavaScript, whose FNV-1a loop does
``hval ^= str.charCodeAt(i)``: it hashes **UTF-16 code units**, not bytes and not
code points. :func:`fnv1a32` does the same: the string is encoded as UTF-16
(``surrogatepass``, so lone surrogates coming from JSON survive), every 16-bit code
unit is XORed into the state as a whole number and the state multiplied by the FNV
prime. Consequences:

* an ASCII string hashes exactly like its bytes (code unit == byte value);
* a BMP character such as ``"é"`` (U+00E9) is one code unit, 0x00E9, XORed in whole
  (a UTF-8 byte hash would XOR 0xC3 then 0xA9 instead);
* an astral character such as ``"😀"`` (U+1F600) is two code units, the surrogates
  0xD83D and 0xDE00, each XORed in and multiplied in turn.

Modules: :mod:`.hashing` (hashing, bucket ranges, variation choice, namespaces), :mod:`.js` (the
JavaScript value semantics conditions are evaluated with) and :mod:`.conditions` (targeting
conditions and version strings). They import nothing outside the standard library.
"""
