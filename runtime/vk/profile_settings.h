#pragma once
// The device profile's overrides as text: EAGLEVK_PROFILE_FILE's key=value lines, then
// EAGLEVK_PROFILE_OVERRIDE's key=value,... list. Only the syntax is checked here; the keys and
// their values are the profile's (runtime/ops/device_profile.h), except subgroup.size, which the
// Context needs before any kernel exists (context.cpp).
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace eaglevk::vk {

struct ProfileSetting {
  std::string key, value;
  std::string source;  // "EAGLEVK_PROFILE_OVERRIDE", or "EAGLEVK_PROFILE_FILE=path:line", for messages
};

// "k=v,k=v" (separator ',') or a file's text (separator '\n', '#' starts a comment); spaces
// around keys and values are dropped. An item without '=' or with an empty key or value is an
// error naming `source` and the item.
std::vector<ProfileSetting> parse_profile_settings(std::string_view text, std::string_view source, char separator);
// The file's settings, then the override's (a later setting of a key wins), as the environment
// gives them.
std::vector<ProfileSetting> profile_settings_from_env();
// The last setting of `key`, or nullopt.
std::optional<ProfileSetting> find_profile_setting(const std::vector<ProfileSetting>& settings, std::string_view key);

}  // namespace eaglevk::vk
