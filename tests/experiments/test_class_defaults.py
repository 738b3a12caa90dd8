"""class_default reads a parameter's default as a call would find it: through ``**kwargs``
to a base class, a subclass's own default first, and refuses what no call could leave out."""
import pytest

from rlfast.experiments.class_defaults import class_default, class_defaults


class Base:
    def __init__(self, rate: float = 0.1, steps: int = 4, note=None, *, flag: bool = False):
        pass


class PassesOn(Base):
    def __init__(self, width: int = 64, **kwargs):
        super().__init__(**kwargs)


class Overrides(PassesOn):
    def __init__(self, rate: float = 0.5, **kwargs):
        super().__init__(rate=rate, **kwargs)


class Closed(Base):
    def __init__(self, width: int = 8):  # takes nothing else: Base's parameters are fixed
        super().__init__()


class NeedsIt(Base):
    def __init__(self, rate: float, **kwargs):
        super().__init__(rate=rate, **kwargs)


class NoInit(Overrides):
    pass


def test_own_and_inherited_defaults():
    assert class_default(Base, "rate") == 0.1
    assert class_default(Base, "flag") is False  # keyword-only
    assert class_default(PassesOn, "width") == 64
    assert class_default(PassesOn, "steps") == 4  # through **kwargs to Base
    assert class_default(Overrides, "rate") == 0.5  # the subclass's own default wins
    assert class_default(NoInit, "rate") == 0.5  # a class without __init__ inherits it


def test_class_defaults_keeps_the_order_asked():
    assert list(class_defaults(Overrides, "steps", "rate", "width").items()) == [
        ("steps", 4), ("rate", 0.5), ("width", 64)]


def test_a_parameter_the_class_does_not_take_names_the_ones_it_does():
    with pytest.raises(ValueError, match=r"PassesOn takes no parameter 'lr'.*width, rate, steps"):
        class_default(PassesOn, "lr")
    # Closed has no **kwargs: Base's rate cannot reach Base through it.
    with pytest.raises(ValueError, match=r"Closed takes no parameter 'rate'.*: width$"):
        class_default(Closed, "rate")


def test_a_required_parameter_has_no_default():
    with pytest.raises(ValueError, match=r"NeedsIt: parameter 'rate' has no default"):
        class_default(NeedsIt, "rate")
