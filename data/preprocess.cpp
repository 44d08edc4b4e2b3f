// Two passes over the input: the first only validates, the second tokenizes batches of
// documents in parallel (document i of a batch goes to worker i mod workers, each worker
// with its own tokenizer memo) and writes each batch in order.
#include "data/preprocess.hpp"

#include <exception>
#include <memory>
#include <thread>

#include "core/error.hpp"
#include "data/gpt2_tokenizer.hpp"
#include "data/indexed_dataset.hpp"
#include "data/preprocess_input.hpp"

namespace tandem::data {
namespace {

constexpr std::size_t kBatchDocuments = 4096;

struct EncodedField {
  std::vector<std::int32_t> tokens;
  std::vector<std::int32_t> sequence_lengths;  // one per non-empty sentence
};
using EncodedDocument = std::vector<EncodedField>;  // one per key

EncodedDocument encode_document(const InputDocument& doc, Gpt2Tokenizer& tokenizer,
                                bool append_eod) {
  EncodedDocument out(doc.fields.size());
  std::vector<std::int32_t> ids;
  for (std::size_t k = 0; k < doc.fields.size(); ++k) {
    EncodedField& field = out[k];
    for (const auto& sentence : doc.fields[k]) {
      ids.clear();
      tokenizer.encode_append(sentence, ids);
      if (ids.empty()) continue;
      field.tokens.insert(field.tokens.end(), ids.begin(), ids.end());
      field.sequence_lengths.push_back(static_cast<std::int32_t>(ids.size()));
    }
    if (append_eod && !field.tokens.empty()) {
      field.tokens.push_back(tokenizer.eod());
      ++field.sequence_lengths.back();
    }
  }
  return out;
}

std::vector<EncodedDocument> encode_batch(const std::vector<InputDocument>& batch,
                                          std::vector<Gpt2Tokenizer>& tokenizers, bool append_eod) {
  std::vector<EncodedDocument> encoded(batch.size());
  std::vector<std::exception_ptr> errors(tokenizers.size());
  std::vector<std::thread> threads;
  for (std::size_t w = 0; w < tokenizers.size(); ++w) {
    threads.emplace_back([&, w] {
      try {
        for (std::size_t i = w; i < batch.size(); i += tokenizers.size())
          encoded[i] = encode_document(batch[i], tokenizers[w], append_eod);
      } catch (...) {
        errors[w] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  return encoded;
}

void check_options(const PreprocessOptions& o) {
  if (o.tokenizer_type != "GPT2BPETokenizer")
    throw ConfigError("--tokenizer-type", o.tokenizer_type, "supported: GPT2BPETokenizer");
  if (o.workers < 1) throw ConfigError("--workers", std::to_string(o.workers), "must be ≥ 1");
  if (o.output_prefix.empty()) throw ConfigError("--output-prefix", "", "is required");
  const auto dir = std::filesystem::path(o.output_prefix).parent_path();
  if (!dir.empty() && !std::filesystem::is_directory(dir))
    throw ConfigError("--output-prefix", o.output_prefix,
                      "its directory " + dir.string() + " does not exist");
  for (const auto& key : o.json_keys)
    if (key.empty() || key.find('/') != std::string::npos)
      throw ConfigError("--json-keys", key, "a key names an output file: non-empty, no '/'");
}

}  // namespace

std::vector<PreprocessOutput> preprocess(const PreprocessOptions& options) {
  check_options(options);
  read_documents(options.input, options.json_keys, [](InputDocument&&) {});  // validate only
  Gpt2Tokenizer tokenizer = Gpt2Tokenizer::from_files(options.vocab_file, options.merge_file);

  std::vector<PreprocessOutput> outputs;
  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers;
  const TokenDType dtype = optimal_token_dtype(tokenizer.vocab_size());
  for (const auto& key : options.json_keys) {
    PreprocessOutput out{key, options.output_prefix + "_" + key + "_document"};
    writers.push_back(std::make_unique<IndexedDatasetWriter>(out.prefix, dtype));
    outputs.push_back(out);
  }
  std::vector<Gpt2Tokenizer> tokenizers(static_cast<std::size_t>(options.workers), tokenizer);
  std::vector<InputDocument> batch;
  const auto write_batch = [&] {
    for (const EncodedDocument& doc : encode_batch(batch, tokenizers, options.append_eod)) {
      for (std::size_t k = 0; k < doc.size(); ++k) {
        writers[k]->add_document(doc[k].tokens, doc[k].sequence_lengths);
        outputs[k].documents += 1;
        outputs[k].sequences += static_cast<std::int64_t>(doc[k].sequence_lengths.size());
        outputs[k].tokens += static_cast<std::int64_t>(doc[k].tokens.size());
      }
    }
    batch.clear();
  };
  read_documents(options.input, options.json_keys, [&](InputDocument&& doc) {
    batch.push_back(std::move(doc));
    if (batch.size() == kBatchDocuments) write_batch();
  });
  write_batch();
  for (auto& writer : writers) writer->finalize();
  return outputs;
}

}  // namespace tandem::data
