"""The per-op autocast policy for musa: the same lists CUDA autocast uses.

Each entry is ``"op"`` or ``"op.overload"`` (``default`` when no overload is
named). Ops that do not exist in the running PyTorch are skipped at
registration.
"""

# Run in the autocast dtype (float16 by default, bfloat16 where the profile has it).
LOWER_PRECISION = [
    "_convolution.deprecated", "_convolution", "conv1d", "conv2d", "conv3d",
    "conv1d.padding", "conv2d.padding", "conv3d.padding",
    "conv_tbc", "conv_transpose1d", "conv_transpose2d.input", "conv_transpose3d.input",
    "convolution", "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv",
    "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot",
    "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell",
    "rnn_tanh_cell", "rnn_relu_cell", "_scaled_dot_product_flash_attention",
    "scaled_dot_product_attention",
]

# Run in float32 (inputs in a lower precision are cast up).
FP32 = [
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor",
    "pow.Scalar", "softplus", "layer_norm", "native_layer_norm", "group_norm",
    "frobenius_norm.dim", "nuclear_norm", "nuclear_norm.dim", "cosine_similarity",
    "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
    "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss",
    "triplet_margin_loss", "multi_margin_loss", "binary_cross_entropy_with_logits", "dist",
    "pdist", "cdist", "renorm", "logsumexp", "rms_norm",
    "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d",
    "_upsample_nearest_exact2d", "upsample_nearest3d", "_upsample_nearest_exact3d",
    "upsample_linear1d", "upsample_bilinear2d", "_upsample_bilinear2d_aa",
    "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa",
    "upsample_nearest1d.vec", "_upsample_nearest_exact1d.vec", "upsample_nearest2d.vec",
    "_upsample_nearest_exact2d.vec", "upsample_nearest3d.vec", "_upsample_nearest_exact3d.vec",
    "upsample_linear1d.vec", "upsample_bilinear2d.vec", "_upsample_bilinear2d_aa.vec",
    "upsample_trilinear3d.vec", "upsample_bicubic2d.vec", "_upsample_bicubic2d_aa.vec",
]

# Run in float32 through their optional ``dtype`` argument (when the first
# input is eligible and the caller gave no dtype).
FP32_SET_OPT_DTYPE = [
    "prod", "prod.dim_int", "prod.dim_Dimname", "softmax.int", "softmax.Dimname",
    "log_softmax.int", "log_softmax.Dimname", "cumprod", "cumprod.dimname", "cumsum",
    "cumsum.dimname", "linalg_vector_norm", "linalg_matrix_norm",
    "linalg_matrix_norm.str_ord", "sum", "sum.dim_IntList", "sum.dim_DimnameList",
]

# Redispatched to the overload that takes a dtype, with float32.
FP32_APPEND_DTYPE = {
    "norm.Scalar": "norm.ScalarOpt_dtype",
    "norm.ScalarOpt_dim": "norm.ScalarOpt_dim_dtype",
    "norm.names_ScalarOpt_dim": "norm.names_ScalarOpt_dim_dtype",
}

# Run in the widest floating type among the inputs.
PROMOTE = [
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler",
    "index_put", "scatter_add", "tensordot", "stack", "cat",
]

# Refuse to run under autocast (unsafe in float16), as CUDA does.
BANNED = {
    "binary_cross_entropy": (
        "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
        "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
        "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
        "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
        "safe to autocast."
    ),
}
