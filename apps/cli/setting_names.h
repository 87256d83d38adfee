#pragma once
// The CLI's words for the settings lower layers' errors are about (eaglevk::Setting): each error
// tagged with one is printed after its flag, as "--spec-topk: tree top-k 17 is out of range".
#include <string>

#include <eaglevk/error.h>

namespace eaglevk::cli {

// The flag that sets `setting` ("--spec-topk"); empty for Setting::None.
const char* flag_of(Setting setting);

// The error's message, led by its setting's flag when it has one.
std::string message_with_flag(const Error& e);

}  // namespace eaglevk::cli
