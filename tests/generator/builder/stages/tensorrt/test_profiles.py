import pytest

from generator.builder.stages.tensorrt.errors import ProfileError
from generator.builder.stages.tensorrt.profiles import DimRange, ShapeProfile, detector_profile


def test_dynamic_batch_fixed_spatial():
    profile = detector_profile("images", ["batch", 3, 640, 640], max_batch=16, opt_batch=8)
    assert profile.min == (1, 3, 640, 640)
    assert profile.opt == (8, 3, 640, 640)
    assert profile.max == (16, 3, 640, 640)
    assert profile.max_batch == 16


def test_opt_defaults_to_max():
    assert detector_profile("images", [None, 3, 320, 320], max_batch=4).opt[0] == 4


def test_fixed_batch_must_match_max_batch():
    assert detector_profile("images", [1, 3, 640, 640], max_batch=1).max == (1, 3, 640, 640)
    with pytest.raises(ProfileError, match=r"fixed batch of 1 .*dynamic=True.*--max-batch 1"):
        detector_profile("images", [1, 3, 640, 640], max_batch=16)


def test_dynamic_spatial_needs_sizes_and_stride_multiples():
    with pytest.raises(ProfileError, match="dynamic height"):
        detector_profile("images", ["n", 3, "h", "w"], max_batch=2)
    profile = detector_profile("images", ["n", 3, "h", "w"], 2, height=DimRange(320, 640, 1280), width=640)
    assert profile.min == (1, 3, 320, 640) and profile.max == (2, 3, 1280, 640)
    with pytest.raises(ProfileError, match="not a multiple of the model stride 32"):
        detector_profile("images", ["n", 3, "h", "w"], 2, height=600, width=640)


def test_fixed_spatial_cannot_be_overridden():
    assert detector_profile("images", ["n", 3, 640, 640], 2, height=640).max[2] == 640
    with pytest.raises(ProfileError, match="fixed height of 640"):
        detector_profile("images", ["n", 3, 640, 640], 2, height=320)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_batch": 0}, "--max-batch must be >= 1"),
        ({"max_batch": 4, "opt_batch": 5}, "--opt-batch must be between 1 and --max-batch"),
        ({"max_batch": 4, "opt_batch": 0}, "--opt-batch must be between 1 and --max-batch"),
    ],
)
def test_batch_flags_are_validated(kwargs, message):
    with pytest.raises(ProfileError, match=message):
        detector_profile("images", ["n", 3, 64, 64], **kwargs)


def test_rank_and_channels_are_validated():
    with pytest.raises(ProfileError, match="rank 3"):
        detector_profile("images", ["n", 64, 64], 1)
    with pytest.raises(ProfileError, match="dynamic channel"):
        detector_profile("images", ["n", "c", 64, 64], 1)


def test_shape_profile_invariants_and_json_roundtrip():
    with pytest.raises(ProfileError, match="min <= opt <= max"):
        ShapeProfile("images", (2, 3, 64, 64), (1, 3, 64, 64), (4, 3, 64, 64))
    with pytest.raises(ProfileError, match="different ranks"):
        ShapeProfile("images", (1, 3, 64), (1, 3, 64, 64), (4, 3, 64, 64))
    with pytest.raises(ProfileError, match="min <= opt <= max"):
        DimRange(4, 2, 8)
    profile = detector_profile("images", ["n", 3, 320, 320], 8, 4)
    assert ShapeProfile.from_json(profile.to_json()) == profile
    with pytest.raises(ProfileError, match="unknown profile key"):
        ShapeProfile.from_json({**profile.to_json(), "extra": 1})


def test_served_uint8_images_are_nhwc():
    # The normalisation prefix serves [N, H, W, 3]: its last dim is the channels, not a width of 3.
    profile = detector_profile("images_bgr_u8", ["batch", 320, 320, 3], max_batch=8, opt_batch=2,
                               height=320, width=320, layout="NHWC")
    assert profile.min == (1, 320, 320, 3) and profile.opt == (2, 320, 320, 3) and profile.max == (8, 320, 320, 3)
    wide = detector_profile("images_bgr_u8", ["n", "h", "w", 3], 4, height=DimRange(320, 480, 640), width=640,
                            layout="NHWC")
    assert wide.min == (1, 320, 640, 3) and wide.max == (4, 640, 640, 3)
    with pytest.raises(ProfileError, match="fixed width of 320; it cannot be built for 640"):
        detector_profile("images_bgr_u8", ["n", 320, 320, 3], 4, height=320, width=640, layout="NHWC")
    with pytest.raises(ProfileError, match="dynamic channel"):
        detector_profile("images_bgr_u8", ["n", 320, 320, "c"], 4, layout="NHWC")
