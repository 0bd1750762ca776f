# cmake -DIN=FILE -DOUT=FILE.cpp -DNAME=symbol -P embed_text.cmake
# Writes a C++ source defining `const char* const cq::coord::NAME` as the
# text of IN (the status page: built into the binary, no external assets).
file(READ "${IN}" content)
string(FIND "${content}" ")cqtext\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} holds the raw string's delimiter )cqtext\"")
endif()
file(WRITE "${OUT}.tmp" "// Generated from ${IN} by cmake/embed_text.cmake: do not edit.\nnamespace cq::coord {\nextern const char* const ${NAME};\nconst char* const ${NAME} = R\"cqtext(${content})cqtext\";\n} // namespace cq::coord\n")
file(RENAME "${OUT}.tmp" "${OUT}")
