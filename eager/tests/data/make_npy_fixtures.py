"""Writes the .npy fixtures that eager/tests/weights_io.rs reads, with NumPy's own writer.

Run from anywhere with a Python that has NumPy: python3 make_npy_fixtures.py
The values here are written literally in the test too; change both together.
"""

import os

import numpy as np

OUT = os.path.dirname(os.path.abspath(__file__))


def save(name, array, version=None):
    path = os.path.join(OUT, name)
    if version is None:
        np.save(path, array)
    else:
        # np.save picks the oldest version that fits; older headers need write_array.
        with open(path, "wb") as f:
            np.lib.format.write_array(f, array, version=version)


# A NaN with a payload (0x7fc00001): loading must keep its bits, not just "some NaN".
f32_bits = np.array([0x3FC00000, 0xC0000000, 0x00000000, 0x80000000, 0x7F800000, 0x7FC00001], dtype="<u4")
save("f32_2x3.npy", f32_bits.view("<f4").reshape(2, 3))
save("i64_vec.npy", np.array([0, -1, 2**63 - 1, -(2**63), 42], dtype="<i8"))
save("bool_scalar.npy", np.array(True))
save("bool_2x2.npy", np.array([[True, False], [False, True]]))
save("f16_vec.npy", np.array([1.0, -0.5, 65504.0, 2.0**-14, -np.inf], dtype="<f2"))
save("u8_1x5.npy", np.array([[0, 1, 127, 128, 255]], dtype="|u1"))
save("i32_vec.npy", np.array([-(2**31), -1, 0, 2**31 - 1], dtype="<i4"))
save("u32_vec.npy", np.array([0, 1, 2**32 - 1], dtype="<u4"))
save("u64_vec.npy", np.array([0, 1, 2**64 - 1], dtype="<u8"))
save("f64_empty_0x3.npy", np.zeros((0, 3), dtype="<f8"))
# Fortran order: the data is column-major (1, 4, 2, 5, 3, 6).
save("f64_2x3_fortran.npy", np.asfortranarray(np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype="<f8")))
save("i32_2x3x4_fortran.npy", np.asfortranarray(np.arange(24, dtype="<i4").reshape(2, 3, 4)))
# Big-endian data, as NumPy writes it on request.
save("i32_be_vec.npy", np.array([1, -2, 3000000], dtype=">i4"))
save("f64_be_2x2.npy", np.array([[1.5, -2.25], [1e300, -0.0]], dtype=">f8"))
# Format versions 2.0 (u32 header length) and 3.0 (UTF-8 header).
save("f32_vec_v2.npy", np.array([1.0, 2.0, 3.0], dtype="<f4"), version=(2, 0))
save("f32_vec_v3.npy", np.array([1.0, 2.0, 3.0], dtype="<f4"), version=(3, 0))
# A header that needs a second 64-byte block only because of NumPy's room for the first axis.
save("u8_rank18.npy", np.full((1,) * 18, 7, dtype="|u1"))
# A dtype eager lacks.
save("i16_vec.npy", np.array([1, 2], dtype="<i2"))
