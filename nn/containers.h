// Containers that register their modules without calling them: ModuleList (children "0", "1", ...)
// and ModuleDict (children under the given names, in insertion order). Their parameters appear in
// named_parameters() -- and so in the optimizer, DDP's buckets and checkpoints -- under those names,
// which is what a std::vector<std::shared_ptr<Module>> member would not do. As in PyTorch, neither
// has a forward: the owner decides how the modules are called (Sequential chains them).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "nn/module.h"

namespace ringgrad::nn {

class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  ModuleList(std::initializer_list<std::shared_ptr<Module>> modules) : Module("ModuleList") {
    for (const auto& m : modules) push_back(m);
  }
  void push_back(std::shared_ptr<Module> module) {
    RG_CHECK(module != nullptr, "ModuleList", "push_back of a null module at index ", modules_.size());
    add_child(std::to_string(modules_.size()), module);
    modules_.push_back(std::move(module));
  }
  size_t size() const { return modules_.size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const {
    RG_CHECK(i < modules_.size(), "ModuleList", "index ", i, " out of range for a list of ", modules_.size());
    return modules_[i];
  }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 protected:
  explicit ModuleList(const char* type) : Module(type) {}  // for Sequential, a list with a forward

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

class ModuleDict : public Module {
 public:
  ModuleDict() : Module("ModuleDict") {}
  // name: a child name (no '.', not already present).
  void insert(const std::string& name, std::shared_ptr<Module> module) {
    RG_CHECK(module != nullptr, "ModuleDict", "insert of a null module under '", name, "'");
    RG_CHECK(!contains(name), "ModuleDict", "'", name, "' is already a key");
    add_child(name, module);
    index_[name] = modules_.size();
    modules_.emplace_back(name, std::move(module));
  }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const std::shared_ptr<Module>& at(const std::string& name) const {
    auto it = index_.find(name);
    RG_CHECK(it != index_.end(), "ModuleDict", "no key '", name, "' (", keys_text(), ")");
    return modules_[it->second].second;
  }
  size_t size() const { return modules_.size(); }
  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    for (const auto& [name, m] : modules_) out.push_back(name);
    return out;
  }
  auto begin() const { return modules_.begin(); }  // (name, module) in insertion order
  auto end() const { return modules_.end(); }

 private:
  std::string keys_text() const {
    std::string s = modules_.empty() ? "it is empty" : "keys:";
    for (const auto& [name, m] : modules_) s += " " + name;
    return s;
  }
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> modules_;
  std::map<std::string, size_t> index_;
};

}  // namespace ringgrad::nn
