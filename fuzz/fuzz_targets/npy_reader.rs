//! Any bytes given to the `.npy` reader give an array or an error, never a panic, a hang or an
//! allocation the input does not pay for; every error is one line of bounded length.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    match flashrs_lab::npy::parse_npy(bytes) {
        Ok(array) => {
            // What parsed must be self-consistent: the element count is the product of the dims,
            // and the data is exactly what followed the header.
            let elements: usize = array.shape.iter().product();
            assert_eq!(array.to_f32().len(), elements);
            let size = match array.dtype_name() {
                "float16" => 2,
                "uint8" => 1,
                _ => 4,
            };
            assert!(elements * size <= bytes.len());
        }
        Err(error) => {
            let message = error.to_string();
            assert_eq!(message.lines().count(), 1, "{message:?}");
            assert!(message.len() < 2000, "{} bytes: {message:?}", message.len());
        }
    }
});
