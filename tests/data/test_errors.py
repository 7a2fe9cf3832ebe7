import numpy as np
import pytest

from joulecast.data.errors import InputError, require_choice


def test_a_choice_names_the_field_a_close_name_and_every_allowed_one():
    require_choice("eager", ("flash", "eager"), "attention")  # allowed: nothing raised
    with pytest.raises(InputError, match=r"^attention: unknown 'flsh'; did you mean 'flash'\? allowed: flash, eager$"):
        require_choice("flsh", ("flash", "eager"), "attention")
    with pytest.raises(InputError, match=r"^front: unknown 'cost'; allowed: energy, carbon$"):  # nothing close
        require_choice("cost", ("energy", "carbon"), "front")
    with pytest.raises(InputError, match=r"^fusions: unknown fusion 'x'; allowed: a, b$"):
        require_choice("x", ("a", "b"), "fusions", what="fusion")


@pytest.mark.parametrize("value", [None, 3, ["flash"], {"flash": 1}, np.array(["flash", "eager"])])
def test_a_choice_that_is_not_a_name_is_refused_as_one_line(value):
    # an array's `in` would compare elementwise and raise numpy's own error; a list or dict is no name either
    with pytest.raises(InputError, match=r"^attention: unknown .*; allowed: flash, eager$"):
        require_choice(value, ("flash", "eager"), "attention")
