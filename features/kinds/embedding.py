"""Embedding lookups: `rows` tokens gather `cols`-wide rows of a table."""

from joulecast.features.kinds import KernelKind, Streaming

KIND = KernelKind(name="embedding", order=5, sizes=("rows", "cols"), rule="streaming",
                  streaming=Streaming(elements="rows x cols", ctas="elements", reduction=False,
                                      instructions_per_element=0))
