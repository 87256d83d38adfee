#include "runtime/vk/profile_settings.h"

#include <fstream>
#include <sstream>

#include <eaglevk/error.h>

#include "runtime/vk/switches.h"

namespace eaglevk::vk {

namespace {

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::vector<ProfileSetting> parse_profile_settings(std::string_view text, std::string_view source, char separator) {
  std::vector<ProfileSetting> out;
  uint32_t line = 0;
  while (true) {
    const size_t end = text.find(separator);
    std::string_view item = text.substr(0, end);
    ++line;
    if (separator == '\n') item = item.substr(0, item.find('#'));
    item = trimmed(item);
    const std::string where = separator == '\n' ? fmt::format("{}:{}", source, line) : std::string(source);
    if (!item.empty()) {
      const size_t eq = item.find('=');
      const std::string_view key = trimmed(item.substr(0, eq));
      const std::string_view value = eq == std::string_view::npos ? std::string_view() : trimmed(item.substr(eq + 1));
      if (eq == std::string_view::npos || key.empty() || value.empty())
        fail("{}: '{}' is not key=value (e.g. attention.split=64)", where, item);
      out.push_back({std::string(key), std::string(value), where});
    }
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return out;
}

std::vector<ProfileSetting> profile_settings_from_env() {
  std::vector<ProfileSetting> settings;
  if (const std::optional<std::string> path = switch_value("EAGLEVK_PROFILE_FILE")) {
    std::ifstream file(*path);
    if (!file) fail("EAGLEVK_PROFILE_FILE={}: cannot read the file", *path);
    std::stringstream text;
    text << file.rdbuf();
    settings = parse_profile_settings(text.str(), "EAGLEVK_PROFILE_FILE=" + *path, '\n');
  }
  if (const std::optional<std::string> list = switch_value("EAGLEVK_PROFILE_OVERRIDE")) {
    std::vector<ProfileSetting> more = parse_profile_settings(*list, "EAGLEVK_PROFILE_OVERRIDE", ',');
    settings.insert(settings.end(), more.begin(), more.end());
  }
  return settings;
}

std::optional<ProfileSetting> find_profile_setting(const std::vector<ProfileSetting>& settings, std::string_view key) {
  for (auto it = settings.rbegin(); it != settings.rend(); ++it)
    if (it->key == key) return *it;
  return std::nullopt;
}

}  // namespace eaglevk::vk
