# Tokenizer and chat templates (owner: tokenizer engineer); included by model/CMakeLists.txt.
list(APPEND LLB_MODEL_SOURCES
     ${CMAKE_CURRENT_LIST_DIR}/tokenizer.c
     ${CMAKE_CURRENT_LIST_DIR}/tokenizer_bpe.c
     ${CMAKE_CURRENT_LIST_DIR}/tokenizer_spm.c
     ${CMAKE_CURRENT_LIST_DIR}/tokenizer_stream.c
     ${CMAKE_CURRENT_LIST_DIR}/chat_template.c)
