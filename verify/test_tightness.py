"""Property 7: the bounds are not vacuous — on T1's tightness instance (sign descent of the
1×1 production Muon on f = Lx²/2 with delay τ) the production run reproduces the theory's
periodic orbit, measured/bound ≥ 1/4, and the measured delay increment is ≥ 1/6 of the bound's
delay term (T3's tightness is exact and is property 5)."""

from hypothesis import given

from verify.profiles import examples
from verify.properties import tightness_t1
from verify.strategies import check, tight_instances

DESC = ("T1 tightness instance (theory.delayed_lmo.tightness_instance) on production Muon: "
        "orbit reproduced, measured/bound >= 1/4, delay increment/delay term >= 1/6")


@examples(12)
@given(inst=tight_instances)
def test_t1_tightness_instance(inst):
    check(tightness_t1(inst), DESC)
