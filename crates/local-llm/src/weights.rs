//! Reading a llama-architecture GGUF file into the layout the forward pass runs on.

use std::{fs::File, io::BufReader, path::Path};

use candle_core::{
    Device,
    quantized::{GgmlDType, gguf_file::Content},
};

use crate::quant::{BLOCK, Q4Matrix, Q8Matrix, QVector};

/// The model's shape, from the GGUF metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub dim: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub vocab: usize,
    pub rope_base: f32,
    pub rms_eps: f32,
    /// The context the model was trained for.
    pub context: usize,
}

impl Config {
    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }
}

/// A weight matrix in one of the two block formats the kernels run.
#[derive(Debug, Clone)]
pub enum Matrix {
    Q4(Q4Matrix),
    Q8(Q8Matrix),
}

impl Matrix {
    pub fn rows(&self) -> usize {
        match self {
            Self::Q4(m) => m.rows,
            Self::Q8(m) => m.rows,
        }
    }

    pub fn cols(&self) -> usize {
        match self {
            Self::Q4(m) => m.cols,
            Self::Q8(m) => m.cols,
        }
    }

    pub fn bytes(&self) -> usize {
        match self {
            Self::Q4(m) => m.bytes(),
            Self::Q8(m) => m.bytes(),
        }
    }

    pub fn dot_rows(&self, rows: std::ops::Range<usize>, inputs: &[QVector], out: &mut [f32]) {
        match self {
            Self::Q4(m) => m.dot_rows(rows, inputs, out),
            Self::Q8(m) => m.dot_rows(rows, inputs, out),
        }
    }

    fn to_q8(&self) -> Q8Matrix {
        match self {
            Self::Q4(m) => Q8Matrix::from_f32(m.rows, m.cols, &m.dequantize()),
            Self::Q8(m) => m.clone(),
        }
    }

    /// Stacks matrices over the same input into one (fewer, larger passes).
    fn stack(parts: Vec<Self>) -> Self {
        if parts.iter().all(|p| matches!(p, Self::Q4(_))) {
            let q4: Vec<Q4Matrix> =
                parts.into_iter().filter_map(|p| if let Self::Q4(m) = p { Some(m) } else { None }).collect();
            Self::Q4(Q4Matrix::stack(&q4))
        } else {
            let q8: Vec<Q8Matrix> = parts.iter().map(Self::to_q8).collect();
            Self::Q8(Q8Matrix::stack(&q8))
        }
    }
}

pub struct Layer {
    pub attn_norm: Vec<f32>,
    /// Q, K and V stacked: `dim + 2 × kv_dim` rows.
    pub qkv: Matrix,
    pub attn_out: Matrix,
    pub ffn_norm: Vec<f32>,
    /// Gate and up stacked: `2 × hidden` rows.
    pub gate_up: Matrix,
    pub down: Matrix,
}

pub struct Weights {
    pub config: Config,
    /// Token embeddings, also the output head (SmolLM2 ties them).
    pub embed: Q8Matrix,
    /// A separate output head, when the file has one.
    pub output: Option<Matrix>,
    pub out_norm: Vec<f32>,
    pub layers: Vec<Layer>,
}

impl Weights {
    /// Bytes of weights read to decode one token: every layer matrix and the output head
    /// (the embedding lookup reads one row, which is negligible).
    pub fn bytes_per_token(&self) -> usize {
        let layers: usize =
            self.layers.iter().map(|l| l.qkv.bytes() + l.attn_out.bytes() + l.gate_up.bytes() + l.down.bytes()).sum();
        layers + self.output.as_ref().map_or(self.embed.bytes(), Matrix::bytes)
    }
}

struct Reader<'a> {
    content: &'a Content,
    file: BufReader<File>,
    path: &'a Path,
}

impl Reader<'_> {
    fn usize(&self, key: &str) -> Result<usize, String> {
        let value = self.content.metadata.get(key).ok_or_else(|| format!("GGUF metadata `{key}` is missing"))?;
        value
            .to_u32()
            .map(|v| v as usize)
            .or_else(|_| value.to_u64().map(|v| v as usize))
            .map_err(|e| format!("`{key}`: {e}"))
    }

    fn f32(&self, key: &str) -> Result<f32, String> {
        let value = self.content.metadata.get(key).ok_or_else(|| format!("GGUF metadata `{key}` is missing"))?;
        value.to_f32().map_err(|e| format!("`{key}`: {e}"))
    }

    fn has(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    fn vector(&mut self, name: &str) -> Result<Vec<f32>, String> {
        let tensor = self.content.tensor(&mut self.file, name, &Device::Cpu).map_err(|e| self.error(name, e))?;
        let values = tensor.dequantize(&Device::Cpu).and_then(|t| t.flatten_all()).and_then(|t| t.to_vec1::<f32>());
        values.map_err(|e| self.error(name, e))
    }

    /// A 2-D weight, kept in its own block format when the kernels run it, otherwise
    /// quantized to Q8_0 from its f32 values.
    fn matrix(&mut self, name: &str) -> Result<Matrix, String> {
        let tensor = self.content.tensor(&mut self.file, name, &Device::Cpu).map_err(|e| self.error(name, e))?;
        let (rows, cols) = tensor.shape().dims2().map_err(|e| self.error(name, e))?;
        if !cols.is_multiple_of(BLOCK) {
            return Err(format!("{name}: {cols} columns is not a multiple of {BLOCK}"));
        }
        let data = || tensor.data().map_err(|e| self.error(name, e));
        match tensor.dtype() {
            GgmlDType::Q4_1 => Q4Matrix::from_gguf(rows, cols, &data()?).map(Matrix::Q4),
            GgmlDType::Q8_0 => Q8Matrix::from_gguf(rows, cols, &data()?).map(Matrix::Q8),
            _ => {
                let values = tensor
                    .dequantize(&Device::Cpu)
                    .and_then(|t| t.flatten_all())
                    .and_then(|t| t.to_vec1::<f32>())
                    .map_err(|e| self.error(name, e))?;
                Ok(Matrix::Q8(Q8Matrix::from_f32(rows, cols, &values)))
            }
        }
    }

    fn error(&self, name: &str, err: impl std::fmt::Display) -> String {
        format!("{}: tensor `{name}`: {err}", self.path.display())
    }
}

impl Weights {
    /// Reads the tokenizer-independent part of a llama GGUF file.
    pub fn load(path: &Path, content: &Content) -> Result<Self, String> {
        let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut reader = Reader { content, file: BufReader::new(file), path };
        let architecture = content.metadata.get("general.architecture").and_then(|v| v.to_string().ok());
        if architecture.map(String::as_str) != Some("llama") {
            return Err(format!("{}: architecture {architecture:?} is not llama", path.display()));
        }
        let dim = reader.usize("llama.embedding_length")?;
        let heads = reader.usize("llama.attention.head_count")?;
        let config = Config {
            dim,
            hidden: reader.usize("llama.feed_forward_length")?,
            layers: reader.usize("llama.block_count")?,
            heads,
            kv_heads: reader.usize("llama.attention.head_count_kv").unwrap_or(heads),
            head_dim: dim / heads,
            vocab: 0,
            rope_base: reader.f32("llama.rope.freq_base").unwrap_or(10_000.0),
            rms_eps: reader.f32("llama.attention.layer_norm_rms_epsilon")?,
            context: reader.usize("llama.context_length").unwrap_or(2048),
        };
        let embed = match reader.matrix("token_embd.weight")? {
            Matrix::Q8(m) => m,
            other => other.to_q8(),
        };
        let output = if reader.has("output.weight") { Some(reader.matrix("output.weight")?) } else { None };
        let out_norm = reader.vector("output_norm.weight")?;
        let mut layers = Vec::with_capacity(config.layers);
        for i in 0..config.layers {
            let mut m = |part: &str| reader.matrix(&format!("blk.{i}.{part}.weight"));
            let qkv = Matrix::stack(vec![m("attn_q")?, m("attn_k")?, m("attn_v")?]);
            let attn_out = m("attn_output")?;
            let gate_up = Matrix::stack(vec![m("ffn_gate")?, m("ffn_up")?]);
            let down = m("ffn_down")?;
            layers.push(Layer {
                attn_norm: reader.vector(&format!("blk.{i}.attn_norm.weight"))?,
                qkv,
                attn_out,
                ffn_norm: reader.vector(&format!("blk.{i}.ffn_norm.weight"))?,
                gate_up,
                down,
            });
        }
        let config = Config { vocab: embed.rows, ..config };
        let weights = Self { config, embed, output, out_norm, layers };
        weights.check()?;
        Ok(weights)
    }

    fn check(&self) -> Result<(), String> {
        let c = &self.config;
        let expect = |what: &str, got: (usize, usize), want: (usize, usize)| {
            if got == want { Ok(()) } else { Err(format!("{what}: shape {got:?}, expected {want:?}")) }
        };
        if c.heads * c.head_dim != c.dim
            || c.kv_heads == 0
            || !c.heads.is_multiple_of(c.kv_heads)
            || !c.head_dim.is_multiple_of(2)
        {
            return Err(format!("unsupported attention shape: {c:?}"));
        }
        expect("token_embd", (self.embed.rows, self.embed.cols), (c.vocab, c.dim))?;
        for (i, l) in self.layers.iter().enumerate() {
            expect(&format!("blk.{i} qkv"), (l.qkv.rows(), l.qkv.cols()), (c.dim + 2 * c.kv_dim(), c.dim))?;
            expect(&format!("blk.{i} attn_output"), (l.attn_out.rows(), l.attn_out.cols()), (c.dim, c.dim))?;
            expect(&format!("blk.{i} gate/up"), (l.gate_up.rows(), l.gate_up.cols()), (2 * c.hidden, c.dim))?;
            expect(&format!("blk.{i} ffn_down"), (l.down.rows(), l.down.cols()), (c.dim, c.hidden))?;
        }
        if let Some(output) = &self.output {
            expect("output", (output.rows(), output.cols()), (c.vocab, c.dim))?;
        }
        Ok(())
    }
}
