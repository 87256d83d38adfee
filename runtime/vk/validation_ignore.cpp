#include "runtime/vk/validation_ignore.h"

#include "runtime/vk/switches.h"

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <string_view>

#include <eaglevk/error.h>

namespace eaglevk::vk {

namespace {

// One ID: 0x followed by hex digits, or decimal digits; surrounding spaces allowed. The layer
// prints the int32 messageIdNumber as its 32-bit pattern, so the value must fit 32 bits.
bool parse_id(std::string_view text, uint32_t& id) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  int base = 10;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    text.remove_prefix(2);
    base = 16;
  }
  if (text.empty() || text.front() == '-' || text.front() == '+') return false;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), id, base);
  return error == std::errc() && end == text.data() + text.size();
}

}  // namespace

std::vector<uint32_t> ignored_validation_ids(const char* list) {
  std::vector<uint32_t> ids;
  if (!list || !*list) return ids;
  std::string_view rest(list);
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    uint32_t id = 0;
    if (!parse_id(item, id))
      fail("EAGLEVK_VALIDATION_IGNORE='{}': '{}' is not a validation message ID (a comma-separated list of "
           "32-bit numbers, hexadecimal 0x... or decimal, as the layer prints them after 'MessageID = ')",
           list, item);
    ids.push_back(id);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return ids;
}

const std::vector<uint32_t>& ignored_validation_ids_in_process() {
  static const std::vector<uint32_t> ids = ignored_validation_ids(switch_value("EAGLEVK_VALIDATION_IGNORE").value_or("").c_str());
  return ids;
}

}  // namespace eaglevk::vk
