#include "loader/draft_verifier.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include <fmt/format.h>

namespace eaglevk::loader {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

// "meta-llama/Llama-3.1-8B-Instruct/" -> "llama-3.1-8b-instruct"
std::string last_component(std::string name) {
  while (!name.empty() && name.back() == '/') name.pop_back();
  const size_t slash = name.rfind('/');
  return lower(slash == std::string::npos ? name : name.substr(slash + 1));
}

// Llama4ForConditionalGeneration and Llama4ForCausalLM (a GGUF file's text tower) are one
// family; LlamaForCausalLM another.
std::string family(const std::string& architecture) {
  return architecture.rfind("Llama4", 0) == 0 ? "llama4" : architecture.rfind("Llama", 0) == 0 ? "llama" : architecture;
}

std::vector<std::string> string_list(const nlohmann::json& j) {
  std::vector<std::string> out;
  if (!j.is_array()) return out;
  for (const auto& v : j)
    if (v.is_string()) out.push_back(v.get<std::string>());
  return out;
}

}  // namespace

std::optional<std::string> verifier_mismatch(const nlohmann::json& draft_config, const nlohmann::json& target_config,
                                             const std::filesystem::path& target_path) {
  if (!draft_config.is_object() || !target_config.is_object()) return std::nullopt;
  const auto spec = draft_config.find("speculators_config");
  if (spec == draft_config.end() || !spec->is_object()) return std::nullopt;
  const auto verifier = spec->find("verifier");
  if (verifier == spec->end() || !verifier->is_object()) return std::nullopt;

  const auto target_archs = target_config.find("architectures");
  const std::vector<std::string> want = string_list(verifier->value("architectures", nlohmann::json()));
  const std::vector<std::string> have =
      target_archs == target_config.end() ? std::vector<std::string>{} : string_list(*target_archs);
  if (!want.empty() && !have.empty() && family(want.front()) != family(have.front()))
    return fmt::format("the draft was trained for a {} verifier, but the target is a {}: expect low acceptance",
                       want.front(), have.front());

  const auto name = verifier->find("name_or_path");
  if (name == verifier->end() || !name->is_string() || last_component(name->get<std::string>()).empty())
    return std::nullopt;
  const std::string wanted = last_component(name->get<std::string>());
  // The target's own names: its folder (or GGUF file, often "<name>-Q4_K_M") and the
  // `_name_or_path` transformers writes into config.json.
  std::filesystem::path path = target_path;
  if (path.filename().empty()) path = path.parent_path();  // "folder/"
  std::vector<std::string> names = {
      lower(std::filesystem::is_directory(path) ? path.filename().string() : path.stem().string())};
  if (const auto own = target_config.find("_name_or_path"); own != target_config.end() && own->is_string())
    names.push_back(last_component(own->get<std::string>()));
  for (const std::string& n : names)
    if (n == wanted || (n.rfind(wanted, 0) == 0 && n.size() > wanted.size() && !std::isalnum(static_cast<unsigned char>(n[wanted.size()]))))
      return std::nullopt;
  return fmt::format("the draft was trained for the verifier '{}', but the target is '{}': expect low acceptance",
                     name->get<std::string>(), target_path.string());
}

}  // namespace eaglevk::loader
