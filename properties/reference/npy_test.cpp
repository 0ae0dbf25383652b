#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "properties/support/test_support.h"
#include "reference/errors.h"
#include "reference/npy.h"

namespace kvcheck {
namespace {

TEST(Npy, RoundTripAndHeaderAlignment) {
  testing::TempDir dir;
  const std::vector<float> data = {1.5F, -2.0F, 3.25F, 0.0F, 1e-30F, -7.0F};
  write_npy_f32(dir / "a.npy", 2, 3, data);
  const std::string bytes = testing::read_file(dir / "a.npy");
  EXPECT_EQ(bytes.substr(0, 6), "\x93NUMPY");
  const std::size_t header_end = 10 + (static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8));
  EXPECT_EQ(header_end % 64, 0U);
  EXPECT_EQ(bytes[header_end - 1], '\n');
  EXPECT_EQ(bytes.size(), header_end + data.size() * 4);
  const NpyArrayF32 back = read_npy_f32(dir / "a.npy");
  EXPECT_EQ(back.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(back.data, data);
}

TEST(Npy, NumpyReadsWhatWeWrite) {
  // Debian's interpreter, where ci/install-deps.sh put numpy (a pyenv python3 may shadow it on PATH).
  const std::string python = std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  if (std::system((python + " -c 'import numpy' >/dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << "python3 with numpy not available (ci/install-deps.sh installs it)";
  }
  testing::TempDir dir;
  const std::vector<float> data = {1.5F, -2.0F, 3.25F, 0.0F, 1e-30F, -7.0F};
  write_npy_f32(dir / "a.npy", 3, 2, data);
  const std::string cmd = python + " -c \"import numpy as np; a = np.load('" + (dir / "a.npy").string() +
                          "'); assert a.dtype == np.float32 and a.shape == (3, 2), a; "
                          "assert a[1, 1] == np.float32(0.0) and a[2, 0] == np.float32(1e-30) and a[0, 1] == -2.0\"";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

TEST(Npy, MalformedFileNamed) {
  testing::TempDir dir;
  testing::write_file(dir / "bad.npy", "not numpy at all");
  try {
    read_npy_f32(dir / "bad.npy");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.npy"), std::string::npos);
  }
}

}  // namespace
}  // namespace kvcheck
