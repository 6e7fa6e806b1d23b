"""ARM EHABI compact unwind instructions (EHABI section 10.3): the ops
(`ops`), their bytes (`codec`: encode, decode) and the interpreter that runs
them (`interpreter`: execute, flatten). Import the package: its names are
those of the three modules."""

from harness.formats.ehabi.codec import CHROME_RUNTIME_FIRST_BYTES, decode, encode, encode_op
from harness.formats.ehabi.interpreter import Flat, Memory, execute, flatten, flatten_two
from harness.formats.ehabi.ops import FINISH, REFUSE, Finish, Op, Pop, PopVfp, PopWmmx, Refuse, SetVsp, VspAdd, text

__all__ = ["CHROME_RUNTIME_FIRST_BYTES", "FINISH", "REFUSE", "Finish", "Flat", "Memory", "Op", "Pop", "PopVfp",
           "PopWmmx", "Refuse", "SetVsp", "VspAdd", "decode", "encode", "encode_op", "execute",
           "flatten", "flatten_two", "text"]
