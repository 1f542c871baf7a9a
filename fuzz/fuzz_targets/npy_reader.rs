//! Any bytes given to the `.npy` reader give an array or an error, never a panic, a hang or an
//! allocation the input does not pay for.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    if let Ok(array) = flashrs::npy::parse_npy(bytes) {
        // What parsed must be self-consistent: the element count is the product of the dims.
        let elements: usize = array.shape.iter().product();
        assert_eq!(array.to_f32().len(), elements);
    }
});
