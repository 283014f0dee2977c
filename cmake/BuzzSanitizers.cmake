# BUZZ_SANITIZE: AddressSanitizer + UndefinedBehaviorSanitizer for every target.
if(BUZZ_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
