// The facade's device and model halves: opening a device, loading a target and its draft,
// and the text side (tokenizer, chat template).
#include <algorithm>

#include <fmt/core.h>

#include <eaglevk/eaglevk.hpp>

#include "loader/draft_verifier.h"
#include "loader/input_path.h"
#include "loader/mmproj.h"
#include "loader/model_files.h"
#include "loader/tensor_check.h"
#include "models/eagle3.h"
#include "models/target.h"
#include "runtime/api/errors.h"
#include "runtime/engine/prompt_images.h"
#include "runtime/ops/gpu.h"

namespace eaglevk::api {
namespace {

namespace fs = std::filesystem;

// The files a loader will open, checked up front so that a missing one reads as an I/O error
// and not as a broken checkpoint.
// A FIFO or a device is refused by its type (loader/input_path.h): opening it would block or
// read forever.
void require_dir(const fs::path& dir, const char* what) {
  if (std::string p = loader::folder_problem(dir, fmt::format("{} folder", what)); !p.empty())
    fail_as(ErrorKind::Io, "{}", p);
}

void require_file(const fs::path& file) {
  if (std::string p = loader::file_problem(file); !p.empty()) fail_as(ErrorKind::Io, "{}", p);
}

void require_checkpoint(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_regular_file(dir / "model.safetensors", ec) && !fs::is_regular_file(dir / "model.safetensors.index.json", ec))
    fail_as(ErrorKind::Io, "folder '{}' has neither model.safetensors nor model.safetensors.index.json", dir.string());
}

// A model folder (config.json, safetensors, and for a target tokenizer.json) or a GGUF file.
void require_model(const fs::path& path, const char* what, bool target) {
  const loader::PathKind kind = loader::path_kind(path);
  if (kind == loader::PathKind::File) return;  // a GGUF file: its loader says what is wrong with it
  if (kind != loader::PathKind::Folder && kind != loader::PathKind::Missing)
    fail_as(ErrorKind::Io, "{}", loader::model_problem(path, what));
  require_dir(path, what);
  require_file(path / "config.json");
  if (target) require_file(path / "tokenizer.json");
  require_checkpoint(path);
}

// A runtime of several devices: each device's layer range and memory; the draft goes with the
// last device, and each device's routed experts go with its layers, on it or in host memory.
void plan_split(const Runtime& runtime, const loader::ModelFiles& files, const loader::ModelFiles* draft,
                LoadPlan& plan) {
  const LoadOptions& o = plan.options;
  std::vector<const vk::Context*> contexts;
  for (const auto& d : runtime.devices) contexts.push_back(&d->gpu->ctx);
  plan.split = engine::plan_split_memory(*runtime.device->gpu, plan.memory, files, draft, o.max_rows, contexts,
                                         o.split, {o.experts_in_host, o.context});
  plan.memory = plan.split->binding;
  plan.notes.push_back("layers split across devices: " + engine::describe_split(*plan.split, 64));
  if (std::string placed = engine::split_placement_note(*plan.split); !placed.empty())
    plan.notes.push_back(std::move(placed));
}

// The earlier parts of a split model, each on its device; the last part is the model itself.
void load_split_target(const Runtime& runtime, const loader::ModelFiles& files, const LoadPlan& plan, Model& m) {
  const std::vector<engine::DeviceShare>& shares = plan.split->devices;
  for (size_t d = 0; d + 1 < shares.size(); ++d) {
    ops::Gpu& gpu = *runtime.devices[d]->gpu;
    std::lock_guard lock(runtime.devices[d]->queue_mutex);
    models::WeightPlacement placement;
    placement.experts_in_host = shares[d].host_weights > 0;
    placement.layers = shares[d].layers;
    auto part = std::make_unique<models::TargetModel>(models::load_target(gpu.ctx, files, placement));
    m.target->earlier.push_back({&gpu, std::move(part)});
  }
}

}  // namespace

Device::~Device() = default;

Runtime open_runtime(const std::string& device) {
  return within(ErrorKind::Device, [&] {
    vk::ContextOptions options = vk::ContextOptions::from_env();
    if (!device.empty()) options.device = device;
    auto d = std::make_shared<Device>();
    d->gpu = std::make_unique<ops::Gpu>(options);
    std::string name = d->gpu->ctx.info.name;
    return Runtime{d, std::move(name), {d}};
  });
}

Runtime open_runtime(std::span<const std::string> devices) {
  if (devices.empty()) throw ApiError(ErrorKind::InvalidArgument, "no devices to open", Setting::Devices);
  Runtime r = open_runtime(devices[0]);
  for (size_t i = 1; i < devices.size(); ++i) r.devices.push_back(open_runtime(devices[i]).device);
  return r;
}

Model::~Model() = default;

int32_t Model::vocab_size() const { return target->config().vocab_size; }
uint32_t Model::max_context() const { return uint32_t(target->config().max_position_embeddings); }

std::string model_name(const fs::path& model) {
  std::error_code ec;
  return fs::is_directory(model, ec) ? model.filename().string() : model.stem().string();
}

LoadPlan plan_load(const Runtime& runtime, const fs::path& target_dir, const LoadOptions& options) {
  if (!runtime.device) fail_as(ErrorKind::InvalidArgument, "the runtime is not open");
  require_model(target_dir, "model", true);
  if (!options.draft.empty()) require_model(options.draft, "draft", false);
  if (!options.mmproj.empty()) require_file(options.mmproj);
  LoadPlan plan;
  plan.target_dir = target_dir;
  plan.options = options;
  within(ErrorKind::Model, [&] {
    auto files = std::make_shared<loader::ModelFiles>(loader::open_model_files(target_dir));
    if (!options.mmproj.empty()) loader::attach_llama4_mmproj(*files, options.mmproj);
    for (const std::string& note : files->notes) plan.notes.push_back(fmt::format("{}: {}", target_dir.filename().string(), note));
    std::optional<loader::ModelFiles> head;
    if (!options.draft.empty()) {
      head = loader::open_model_files(options.draft);
      if (auto warning = loader::verifier_mismatch(head->config, files->config, target_dir))
        plan.notes.push_back("warning: " + *warning);
    }
    plan.memory = engine::plan_memory(*runtime.device->gpu, *files, head ? &*head : nullptr, options.max_rows,
                                      {options.experts_in_host, options.context});
    if (runtime.devices.size() > 1)
      plan_split(runtime, *files, head ? &*head : nullptr, plan);
    else if (!options.split.empty())
      plan.notes.push_back("warning: shares of the layers were given for a runtime of one device: every layer is on it");
    if (loader::should_check_tensors(options.check_tensors, plan.memory.weights)) {
      loader::check_tensors_finite(files->checkpoint, files->source());
      if (head) loader::check_tensors_finite(head->checkpoint, head->source());
    }
    std::string note;
    plan.context = plan.split ? engine::choose_split_context(*plan.split, options.context, &note)
                              : engine::choose_context(plan.memory, options.context, &note);
    if (std::string placed = engine::placement_note(plan.memory); !placed.empty()) plan.notes.push_back(std::move(placed));
    if (!note.empty()) plan.notes.push_back(std::move(note));
    plan.target_files = std::move(files);
  });
  return plan;
}

std::shared_ptr<const Model> load_model(const Runtime& runtime, LoadPlan plan,
                                        std::function<void(uint64_t bytes)> on_upload) {
  if (!runtime.device) fail_as(ErrorKind::InvalidArgument, "the runtime is not open");
  if (!plan.target_files) fail_as(ErrorKind::InvalidArgument, "the load plan holds no model files");
  auto m = std::make_shared<Model>();
  m->device = plan.split ? runtime.devices.back() : runtime.device;
  m->devices = plan.split ? runtime.devices : std::vector<std::shared_ptr<Device>>{runtime.device};
  m->split = plan.split;
  m->target_dir = plan.target_dir;
  m->draft_dir = plan.options.draft;
  m->memory = plan.memory;
  m->planned_context = plan.context;
  const loader::ModelFiles& files = *plan.target_files;
  {
    // Weight uploads go through the device's queue.
    std::lock_guard lock(m->device->queue_mutex);
    vk::Context& ctx = m->device->gpu->ctx;
    // The observer hears this load's uploads only, on every device the model loads onto.
    struct Observe {
      vk::Context& ctx;
      std::function<void(uint64_t)> before;
      Observe(vk::Context& c, const std::function<void(uint64_t)>& hear) : ctx(c), before(c.on_upload) {
        if (hear) ctx.on_upload = hear;
      }
      ~Observe() { ctx.on_upload = std::move(before); }
      Observe(const Observe&) = delete;
      Observe& operator=(const Observe&) = delete;
    };
    std::vector<std::unique_ptr<Observe>> observers;
    for (const std::shared_ptr<Device>& d : m->devices)
      observers.push_back(std::make_unique<Observe>(d->gpu->ctx, on_upload));
    within(ErrorKind::Model, [&] {
      models::WeightPlacement placement = plan.memory.placement();
      if (plan.split) {
        placement.layers = plan.split->devices.back().layers;
        placement.experts_in_host = plan.split->devices.back().host_weights > 0;
        placement.embed_always = !m->draft_dir.empty();  // the draft embeds its tokens with the target's table
      }
      m->target = std::make_unique<models::TargetModel>(models::load_target(ctx, files, placement));
      if (plan.split) load_split_target(runtime, files, plan, *m);
      m->tokenizer = loader::load_tokenizer(files);
      m->chat = loader::load_chat_template(files, m->tokenizer, &m->chat_error);
      if (!plan.options.chat_template.empty()) {
        // The replacement keeps the checkpoint's special tokens (its template's, else the
        // tokenizer's BOS).
        const int32_t bos_id = m->tokenizer.bos_id();
        const std::string bos = m->chat ? m->chat->bos_token : bos_id >= 0 ? m->tokenizer.token(bos_id) : std::string();
        const std::string eos = m->chat ? m->chat->eos_token : std::string();
        m->chat = loader::chat_template_from_file(plan.options.chat_template, bos, eos);
        m->chat_error.clear();
      }
      if (!m->draft_dir.empty())
        m->draft = std::make_unique<models::Eagle3Model>(
            models::load_eagle3(ctx, m->draft_dir, m->target->config(), plan.options.aux_layers));
    });
    // A processor config that disagrees with the vision tower is a reason to refuse images,
    // not text.
    try {
      // A split model's tower is with its first part, on the first device.
      const models::TargetModel& first = plan.split ? *m->target->earlier.front().model : *m->target;
      if (auto support = engine::image_support(first, files, m->tokenizer, &m->no_images_reason))
        m->images = std::make_unique<engine::ImageSupport>(std::move(*support));
    } catch (const Error& e) {
      m->no_images_reason = e.what();
    }
    if (!m->images && files.format == "gguf" && files.mmproj.empty()) m->no_images_setting = Setting::VisionProjector;
  }
  m->eos_ids = engine::merge_eos_ids(m->target->config().eos_token_ids, m->tokenizer.eos_ids());
  return m;
}

std::shared_ptr<const Model> load_model(const Runtime& runtime, const fs::path& target_dir, const fs::path& draft_dir) {
  LoadOptions options;
  options.draft = draft_dir;
  return load_model(runtime, plan_load(runtime, target_dir, options));
}

std::vector<int32_t> tokenize(const Model& m, std::string_view text, bool add_bos) {
  // The tokenizer refuses only its input (invalid UTF-8).
  return within(ErrorKind::InvalidArgument, [&] { return m.tokenizer.encode(text, add_bos); });
}

std::string detokenize(const Model& m, std::span<const int32_t> ids, bool skip_special) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (!m.tokenizer.is_valid(ids[i]))
      fail_as(ErrorKind::InvalidArgument, "token id {} (at {}) is not in the tokenizer's vocabulary", ids[i], i);
  return within(ErrorKind::InvalidArgument, [&] { return m.tokenizer.decode(ids, skip_special); });
}

std::string apply_chat_template(const Model& m, std::span<const loader::ChatMessage> messages,
                                bool add_generation_prompt) {
  if (!m.chat) fail_as(ErrorKind::Model, "{}", m.chat_error);
  return within(ErrorKind::InvalidArgument, [&] { return m.chat->render(messages, add_generation_prompt); });
}

}  // namespace eaglevk::api
