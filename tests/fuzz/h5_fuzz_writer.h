// Builds small HDF5 files whose attributes and datasets come from fuzz
// input, so the fuzzers exercise ratchet's attribute readers (types, ranges,
// missing and extra attributes, inconsistent sizes) rather than the HDF5
// library's own file parser, which is not ratchet's code.
#pragma once
#include <fuzzer/FuzzedDataProvider.h>
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ratchet::fuzz {

inline void put_scalar(hid_t obj, const char* name, hid_t type, const void* v) {
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  if (a >= 0) {
    H5Awrite(a, type, v);
    H5Aclose(a);
  }
  H5Sclose(space);
}

inline void put_string(hid_t obj, const char* name, const std::string& v) {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, v.empty() ? 1 : v.size());
  std::string buf = v.empty() ? std::string(1, '\0') : v;
  put_scalar(obj, name, t, buf.data());
  H5Tclose(t);
}

// An attribute `name` of a type and value the input picks (or none).
inline void put_fuzzed_attr(FuzzedDataProvider& in, hid_t obj, const char* name,
                            int64_t small_lo, int64_t small_hi) {
  switch (in.ConsumeIntegralInRange<int>(0, 5)) {
    case 0: return;  // absent
    case 1: {        // a plausible small integer
      int64_t v = in.ConsumeIntegralInRange<int64_t>(small_lo, small_hi);
      put_scalar(obj, name, H5T_NATIVE_INT64, &v);
      return;
    }
    case 2: {
      int64_t v = in.ConsumeIntegral<int64_t>();
      put_scalar(obj, name, H5T_NATIVE_INT64, &v);
      return;
    }
    case 3: {
      uint64_t v = in.ConsumeIntegral<uint64_t>();
      put_scalar(obj, name, H5T_NATIVE_UINT64, &v);
      return;
    }
    case 4: {
      double v = in.ConsumeFloatingPoint<double>();
      put_scalar(obj, name, H5T_NATIVE_DOUBLE, &v);
      return;
    }
    default:
      put_string(obj, name, in.ConsumeRandomLengthString(64));
  }
}

// A 1-D dataset of up to `max_n` elements of a type the input picks.
inline void put_fuzzed_dataset(FuzzedDataProvider& in, hid_t file, const char* name,
                               size_t exact_n, size_t max_n) {
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) return;  // absent
  const size_t n = in.ConsumeBool() ? exact_n : in.ConsumeIntegralInRange<size_t>(0, max_n);
  static const hid_t types[] = {H5T_NATIVE_UINT16, H5T_NATIVE_UINT32, H5T_NATIVE_INT32,
                                H5T_NATIVE_UINT64, H5T_NATIVE_FLOAT, H5T_NATIVE_DOUBLE};
  const hid_t type = types[in.ConsumeIntegralInRange<int>(0, 5)];
  std::vector<uint8_t> bytes = in.ConsumeBytes<uint8_t>(n * H5Tget_size(type));
  bytes.resize(n * H5Tget_size(type));
  hsize_t dims[1] = {n};
  hid_t space = H5Screate_simple(1, dims, nullptr);
  hid_t d = H5Dcreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (d >= 0) {
    if (n) H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data());
    put_fuzzed_attr(in, d, "crc32", 0, 0xffffffffLL);
    H5Dclose(d);
  }
  H5Sclose(space);
}

}  // namespace ratchet::fuzz
