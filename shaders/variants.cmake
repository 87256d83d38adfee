# Shader variants: eaglevk_shader(NAME FILE DEFINES...)
