# CPU kernels (ggml-order and packed matmuls) and the LLaMA forward pass.
llb_add_test(test_kernels_cpu SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kernels_cpu.c
             LIBS llmbus_kernels_cpu PkgConfig::CMOCKA LABELS unit TIMEOUT 300)
# Quantized KV caches (q8_0, fp8 e4m3): stored bytes, attention equal to the fp16 values read.
llb_add_test(test_kv_cache_dtype SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kv_cache_dtype.c
             LIBS llmbus_kernels_cpu PkgConfig::CMOCKA m LABELS unit TIMEOUT 300)
llb_add_test(test_forward SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_forward.c
             LIBS llmbus_model llmbus_kernels_cpu llmbus_test_gguf_writer PkgConfig::CMOCKA
             LABELS unit TIMEOUT 300)
# The in-process session of the tools (model/forward/session.c): chunking, reset and truncate change no logit.
llb_add_test(test_session SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_session.c
             LIBS llmbus_model llmbus_test_gguf_writer PkgConfig::CMOCKA LABELS unit TIMEOUT 120)
llb_add_test(test_kernels_packed SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kernels_packed.c
             LIBS llmbus_kernels_cpu PkgConfig::CMOCKA LABELS unit TIMEOUT 300)
# The CPU backend's LoRA op (kernels/cpu/lora.c): against double, levels, batch invariance.
llb_add_test(test_kernels_lora SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kernels_lora.c
             LIBS llmbus_kernels_cpu PkgConfig::CMOCKA m LABELS unit TIMEOUT 120)
llb_add_test(test_forward_quant_types SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_forward_quant_types.c
             LIBS llmbus_model llmbus_kernels_cpu llmbus_test_gguf_writer PkgConfig::CMOCKA
             LABELS unit TIMEOUT 300)
# qwen2 / qwen3 (and llama) against logits llama.cpp computed on the same tiny models.
llb_add_test(test_forward_arch SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_forward_arch.c ${CMAKE_CURRENT_LIST_DIR}/arch_models.c
             LIBS llmbus_model llmbus_kernels_cpu llmbus_test_gguf_writer PkgConfig::CMOCKA m
             LABELS unit TIMEOUT 120)
# LoRA adapters (model/forward/lora.h): logits against llama.cpp's with the same adapter on the
# tiny models, the loader's refusals, a mixed-adapter batch bit-identical to each sequence alone.
llb_add_test(test_lora SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_lora.c ${CMAKE_CURRENT_LIST_DIR}/arch_models.c
             ${CMAKE_CURRENT_LIST_DIR}/lora_models.c
             LIBS llmbus_model llmbus_kernels_cpu llmbus_test_gguf_writer PkgConfig::CMOCKA m
             LABELS unit TIMEOUT 120)
# The vision encoder's ops (LayerNorm with bias, GELU tanh/quick, bias add, bidirectional
# attention) against naive references.
llb_add_test(test_kernels_vit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kernels_vit.c
             LIBS llmbus_kernels_cpu PkgConfig::CMOCKA m LABELS unit TIMEOUT 120)
# The forward's device path (uploads, steps, decode padding) over a device backend emulated in
# host memory on the CPU ops: bit-identical to the CPU forward, indices checked before a step.
llb_add_test(test_forward_device SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_forward_device.c
             ${CMAKE_CURRENT_LIST_DIR}/lora_models.c
             LIBS llmbus_model llmbus_kernels_cpu llmbus_test_gguf_writer PkgConfig::CMOCKA
             LABELS unit TIMEOUT 120)
