// The paths a user gives: inputs are refused by their type before anything opens them (a FIFO
// never blocks a reader), outputs are written atomically over regular files and in place into
// FIFOs and links (loader/input_path.h, loader/output_file.h); image paths stay in their folder;
// error messages never quote a file's bytes.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/dataset.h"
#include "loader/gguf.h"
#include "loader/image_decode.h"
#include "loader/input_path.h"
#include "loader/json_excerpt.h"
#include "loader/output_file.h"
#include "loader/safetensors.h"
#include "loader/text_file.h"
#include "loader/tokenizer.h"
#include "support/loader_test_util.h"

namespace fs = std::filesystem;
using namespace eaglevk::loader;
using eaglevk::testing::expect_error;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() / fmt::format("eaglevk_paths_{}_{}", info->name(), ::getpid());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

fs::path make_fifo(const fs::path& path) {
  EXPECT_EQ(::mkfifo(path.c_str(), 0600), 0) << path;
  return path;
}

bool stays_fifo(const fs::path& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
}

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `f` (expected to throw eaglevk::Error mentioning `word`) with a deadline: when it blocks
// on the FIFO instead, the test fails and a writer is opened and closed to release it.
template <typename F>
void expect_prompt_error(const fs::path& fifo, F f, const std::string& word) {
  auto result = std::async(std::launch::async, [&] {
    try {
      f();
      return std::string("no error");
    } catch (const eaglevk::Error& e) {
      return std::string(e.what());
    }
  });
  if (result.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    ADD_FAILURE() << "blocked on the FIFO " << fifo;
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  const std::string message = result.get();
  EXPECT_NE(message.find(word), std::string::npos) << message;
}

TEST(InputPath, KindsAndReasons) {
  TempDir tmp;
  const fs::path file = tmp.path / "a.txt", fifo = make_fifo(tmp.path / "pipe");
  std::ofstream(file) << "x";
  EXPECT_EQ(path_kind(file), PathKind::File);
  EXPECT_EQ(path_kind(tmp.path), PathKind::Folder);
  EXPECT_EQ(path_kind(fifo), PathKind::Fifo);
  EXPECT_EQ(path_kind("/dev/null"), PathKind::CharDevice);
  EXPECT_EQ(path_kind(tmp.path / "none"), PathKind::Missing);
  EXPECT_EQ(path_kind(file / "below"), PathKind::Missing);  // ENOTDIR
  EXPECT_EQ(file_problem(file), "");
  EXPECT_EQ(file_problem(fifo, "dataset"), fmt::format("dataset '{}' is a FIFO, not a file", fifo.string()));
  EXPECT_EQ(file_problem("/dev/zero"), "'/dev/zero' is a character device, not a file");
  EXPECT_EQ(file_problem(tmp.path), fmt::format("'{}' is a folder, not a file", tmp.path.string()));
  EXPECT_EQ(folder_problem(file, "model folder"), fmt::format("model folder '{}' is a regular file, not a folder", file.string()));
  EXPECT_EQ(model_problem(fifo), fmt::format("'{}' is a FIFO, not a model folder or a GGUF file", fifo.string()));
  EXPECT_EQ(model_problem(tmp.path), "");
  EXPECT_EQ(model_problem(file), "");
  EXPECT_EQ(file_problem(tmp.path / "none"), fmt::format("'{}' does not exist", (tmp.path / "none").string()));
}

// Every reader refuses a FIFO at once instead of waiting for a writer that never comes.
TEST(InputPath, ReadersRefuseAFifoWithoutBlocking) {
  TempDir tmp;
  const fs::path fifo = make_fifo(tmp.path / "pipe");
  expect_prompt_error(fifo, [&] { read_text_file(fifo); }, "is a FIFO, not a file");
  expect_prompt_error(fifo, [&] { load_dataset(fifo, true); }, "dataset '" + fifo.string() + "' is a FIFO, not a file");
  expect_prompt_error(fifo, [&] { MappedFile::open(fifo); }, "not a regular file (a FIFO)");
  expect_prompt_error(fifo, [&] { GgufFile::open(fifo); }, "a FIFO");
  expect_prompt_error(fifo, [&] { load_image(fifo); }, "image '" + fifo.string() + "' is a FIFO, not a file");
  expect_prompt_error(fifo, [&] { Checkpoint::open(fifo); }, "FIFO");
  auto gguf = std::async(std::launch::async, [&] { return is_gguf_file(fifo); });
  ASSERT_EQ(gguf.wait_for(std::chrono::seconds(20)), std::future_status::ready) << "is_gguf_file blocked on a FIFO";
  EXPECT_FALSE(gguf.get());
  EXPECT_TRUE(stays_fifo(fifo));
}

// A regular file is replaced whole (no temporary left behind); a failed write leaves it as it was.
TEST(OutputFile, RegularFilesAreReplacedAtomically) {
  TempDir tmp;
  const fs::path file = tmp.path / "out.json";
  std::ofstream(file) << "old";
  write_output_file(file, [](std::ostream& out) { out << "new contents"; });
  EXPECT_EQ(read_all(file), "new contents");
  EXPECT_EQ(names_in(tmp.path), std::set<std::string>{"out.json"});
  EXPECT_THROW(write_output_file(file,
                                 [](std::ostream& out) {
                                   out << "half";
                                   throw std::runtime_error("the writer failed");
                                 }),
               std::runtime_error);
  EXPECT_EQ(read_all(file), "new contents");
  EXPECT_EQ(names_in(tmp.path), std::set<std::string>{"out.json"});
  // A new name, and tellp() counting the bytes written, small pieces and large blocks alike.
  const fs::path fresh = tmp.path / "fresh.bin";
  const std::string block(200000, 'b');
  std::vector<std::streamoff> positions;
  write_output_file(fresh, [&](std::ostream& out) {
    out << "abc";
    positions.push_back(out.tellp());
    out.write(block.data(), std::streamsize(block.size()));
    positions.push_back(out.tellp());
    out << 'z';
    positions.push_back(out.tellp());
  });
  EXPECT_EQ(positions, (std::vector<std::streamoff>{3, 200003, 200004}));
  EXPECT_EQ(read_all(fresh), "abc" + block + "z");
  EXPECT_EQ(names_in(tmp.path), (std::set<std::string>{"fresh.bin", "out.json"}));
}

// Renaming over a FIFO would replace it with a regular file: it is written in place, and the
// reader at its other end gets the bytes.
TEST(OutputFile, FifoIsWrittenInPlace) {
  TempDir tmp;
  const fs::path fifo = make_fifo(tmp.path / "pipe");
  const std::string payload(300000, 'q');
  auto reader = std::async(std::launch::async, [&] { return read_all(fifo); });
  write_output_file(fifo, [&](std::ostream& out) { out << payload; });
  ASSERT_EQ(reader.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_EQ(reader.get(), payload);
  EXPECT_TRUE(stays_fifo(fifo));
  EXPECT_EQ(names_in(tmp.path), std::set<std::string>{"pipe"});
}

// /dev/stdout redirected to a file: the contents follow what was printed before, neither
// truncating the file nor writing over its start (as reopening /proc/self/fd/1 would).
TEST(OutputFile, OwnStdoutIsWrittenAfterWhatWasPrinted) {
  TempDir tmp;
  const fs::path file = tmp.path / "stdout.txt";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ::dup2(fd, STDOUT_FILENO) < 0) ::_exit(3);
    std::printf("the report\n");  // still in stdio's buffer
    try {
      write_output_file("/dev/stdout", [](std::ostream& out) { out << "{\"json\": 1}\n"; });
    } catch (...) {
      ::_exit(4);
    }
    std::fflush(stdout);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(read_all(file), "the report\n{\"json\": 1}\n");
}

// A symbolic link stays a link; the file it names gets the contents.
TEST(OutputFile, LinkIsWrittenThrough) {
  TempDir tmp;
  const fs::path target = tmp.path / "target.txt", link = tmp.path / "link.txt";
  std::ofstream(target) << "old and longer";
  fs::create_symlink(target, link);
  write_output_file(link, [](std::ostream& out) { out << "new"; });
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(read_all(target), "new");
}

TEST(OutputFile, FoldersAndMissingFoldersAreRefused) {
  TempDir tmp;
  auto nothing = [](std::ostream& out) { out << "x"; };
  expect_error([&] { write_output_file(tmp.path, nothing); }, "is a folder, not a file to write");
  expect_error([&] { write_output_file(tmp.path / "no_dir" / "x.json", nothing); }, "folder '" + (tmp.path / "no_dir").string() + "' does not exist");
  EXPECT_EQ(output_problem(tmp.path / "new.json"), "");
  EXPECT_EQ(output_problem("/dev/null"), "");
  EXPECT_NE(output_problem(tmp.path, "--json").find("--json '"), std::string::npos);
  EXPECT_EQ(names_in(tmp.path), std::set<std::string>{});
}

// Containment is decided on resolved paths: "..", absolute paths and links that leave the folder
// are outside.
TEST(InputPath, ImagePathsStayInTheirFolder) {
  TempDir tmp;
  fs::create_directories(tmp.path / "data" / "pics");
  std::ofstream(tmp.path / "data" / "pics" / "a.png") << "x";
  std::ofstream(tmp.path / "outside.png") << "x";
  fs::create_symlink(tmp.path / "outside.png", tmp.path / "data" / "sneaky.png");
  const fs::path data = tmp.path / "data";
  EXPECT_TRUE(path_is_inside(data / "pics" / "a.png", data));
  EXPECT_TRUE(path_is_inside(data / "pics" / ".." / "pics" / "a.png", data));
  EXPECT_TRUE(path_is_inside(data / "not_yet.png", data));
  EXPECT_FALSE(path_is_inside(data / ".." / "outside.png", data));
  EXPECT_FALSE(path_is_inside("/etc/passwd", data));
  EXPECT_FALSE(path_is_inside(data / "sneaky.png", data));
  EXPECT_FALSE(path_is_inside(data, data));
  // A dataset confines its images to its folder and the allowed ones; a bad line names the image.
  std::ofstream(data / "d.jsonl")
      << R"({"messages": [{"role": "user", "content": [{"type": "image", "image": "pics/a.png"}]}]})" << "\n"
      << R"({"messages": [{"role": "user", "content": [{"type": "image", "image": "../outside.png"}]}]})" << "\n";
  const Dataset d = load_dataset(data / "d.jsonl", false);
  ASSERT_EQ(d.items.size(), 1u);
  ASSERT_EQ(d.problems.size(), 1u);
  EXPECT_EQ(d.problems[0].line, 2u);
  EXPECT_NE(d.problems[0].message.find("image '" + (data / "../outside.png").string() + "' lies outside"), std::string::npos)
      << d.problems[0].message;
  EXPECT_EQ(load_dataset(data / "d.jsonl", true, {tmp.path}).items.size(), 2u);
}

// The bytes of a file reach no error message: not an image's, not a JSON file's.
TEST(ErrorMessages, NeverQuoteAFilesBytes) {
  const std::string secret = "hunter2-SECRET-password";
  const std::vector<uint8_t> text(secret.begin(), secret.end());
  try {
    decode_image(text);
    ADD_FAILURE() << "decoded text as an image";
  } catch (const eaglevk::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("not a PNG or JPEG image (23 bytes that start with text)"), std::string::npos) << m;
    EXPECT_EQ(m.find("SECRET"), std::string::npos) << m;
    EXPECT_EQ(m.find("68 75"), std::string::npos) << m;  // "hu" in hex
  }
  const std::vector<uint8_t> binary = {0x00, 0x01, 0xfe, 0x7f, 0x53, 0x45};
  expect_error([&] { decode_image(binary); }, "6 bytes that start with no known image signature");
  for (const std::string bad : {"{\"role\": " + secret, "[" + secret + "]", "{\"a\": \"" + secret + "\u0001\"}"}) {
    try {
      (void)nlohmann::json::parse(bad);
      ADD_FAILURE() << bad;
    } catch (const nlohmann::json::parse_error& e) {
      const std::string m = json_parse_error_text(e);
      EXPECT_EQ(m.find("hunter2"), std::string::npos) << m;
      EXPECT_NE(m.find("parse error at line 1, column"), std::string::npos) << m;
    }
  }
  // What the readers of messages and datasets report.
  const Dataset d = parse_dataset("{\"prompt\": " + secret + "}\n{\"prompt\": \"ok\"}\n", "mem", false);
  ASSERT_EQ(d.problems.size(), 1u);
  EXPECT_EQ(d.problems[0].message.find("hunter2"), std::string::npos) << d.problems[0].message;
}

// A text of more than N * max_input_bytes_per_token() bytes never encodes to N tokens or fewer:
// the bound the CLI uses to refuse a prompt before encoding it.
TEST(Tokenizer, InputBytesPerTokenBoundsEveryEncoding) {
  const Tokenizer t = Tokenizer::load(fs::path(EAGLEVK_ASSETS) / "tiny-llama3");
  const size_t per_token = t.max_input_bytes_per_token();
  ASSERT_GE(per_token, 4u);
  std::mt19937 rng(7);
  std::vector<std::string> texts = {std::string(5000, ' '), std::string(5000, 'a'), std::string(3000, '\n'),
                                    "<|begin_of_text|><|eot_id|>", "The modules described in this chapter"};
  for (int i = 0; i < 200; ++i) texts.push_back(eaglevk::testing::random_utf8_text(rng));
  std::string words;
  for (int i = 0; i < 300; ++i) words += eaglevk::testing::random_utf8_text(rng) + " ";
  texts.push_back(words);
  for (const std::string& text : texts) {
    const size_t tokens = t.encode(text, false).size();
    EXPECT_LE(text.size(), tokens * per_token) << text.substr(0, 80);
  }
  // The bound is tight enough to matter: no token of the vocabulary is longer.
  size_t longest = 0;
  for (int32_t id = 0; id < t.vocab_size(); ++id)
    if (t.is_valid(id)) longest = std::max(longest, t.token_bytes(id).size());
  EXPECT_EQ(per_token, std::max<size_t>(longest, 4));
}

}  // namespace
