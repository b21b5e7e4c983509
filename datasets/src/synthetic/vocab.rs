//! Word lists of the synthetic generator. Names are built by combining these parts, so that every
//! domain has enough distinct names at STaRK-Prime scale.

pub const COLORS: &[&str] = &[
    "black", "white", "red", "blue", "green", "yellow", "orange", "purple", "pink", "brown", "gray",
    "silver", "gold", "navy", "teal", "beige", "maroon", "olive", "turquoise", "charcoal", "ivory",
    "lavender", "coral", "burgundy",
];

/// (plural category noun, singular product noun, department)
pub const CATEGORY_BASES: &[(&str, &str, &str)] = &[
    ("Tents", "Tent", "Camping"),
    ("Sleeping Bags", "Sleeping Bag", "Camping"),
    ("Backpacks", "Backpack", "Outdoor"),
    ("Hiking Boots", "Hiking Boot", "Footwear"),
    ("Running Shoes", "Running Shoe", "Footwear"),
    ("Water Bottles", "Water Bottle", "Outdoor"),
    ("Headlamps", "Headlamp", "Camping"),
    ("Camp Stoves", "Camp Stove", "Camping"),
    ("Trekking Poles", "Trekking Pole", "Outdoor"),
    ("Rain Jackets", "Rain Jacket", "Clothing"),
    ("Yoga Mats", "Yoga Mat", "Fitness"),
    ("Dumbbells", "Dumbbell Set", "Fitness"),
    ("Resistance Bands", "Resistance Band", "Fitness"),
    ("Cycling Helmets", "Cycling Helmet", "Cycling"),
    ("Bike Lights", "Bike Light", "Cycling"),
    ("Swim Goggles", "Swim Goggle", "Water Sports"),
    ("Fishing Rods", "Fishing Rod", "Fishing"),
    ("Kayak Paddles", "Kayak Paddle", "Water Sports"),
    ("Ski Gloves", "Ski Glove", "Winter Sports"),
    ("Snowshoes", "Snowshoe", "Winter Sports"),
    ("Headphones", "Headphone", "Electronics"),
    ("Bluetooth Speakers", "Bluetooth Speaker", "Electronics"),
    ("Phone Cases", "Phone Case", "Electronics"),
    ("Chargers", "Charger", "Electronics"),
    ("Smart Watches", "Smart Watch", "Electronics"),
    ("Keyboards", "Keyboard", "Computers"),
    ("Computer Mice", "Mouse", "Computers"),
    ("Monitors", "Monitor", "Computers"),
    ("Webcams", "Webcam", "Computers"),
    ("USB Hubs", "USB Hub", "Computers"),
    ("Chef Knives", "Chef Knife", "Kitchen"),
    ("Cutting Boards", "Cutting Board", "Kitchen"),
    ("Coffee Grinders", "Coffee Grinder", "Kitchen"),
    ("Blenders", "Blender", "Kitchen"),
    ("Cookware Sets", "Cookware Set", "Kitchen"),
    ("Food Containers", "Food Container", "Kitchen"),
    ("Travel Mugs", "Travel Mug", "Kitchen"),
    ("Desk Lamps", "Desk Lamp", "Home"),
    ("Throw Pillows", "Throw Pillow", "Home"),
    ("Bath Towels", "Bath Towel", "Home"),
];

pub const CATEGORY_MODIFIERS: &[&str] = &[
    "", "Kids' ", "Professional ", "Compact ", "Premium ", "Budget ", "Outdoor ", "Travel ",
    "Ultralight ", "Heavy-Duty ",
];

pub const BRAND_HEADS: &[&str] = &[
    "Zen", "Kov", "Alt", "Nor", "Tri", "Vel", "Sol", "Mar", "Bri", "Cor", "Dra", "Eli", "Fen", "Gal",
    "Hal", "Ira", "Jov", "Kel", "Lum", "Nex", "Orb", "Pax", "Qui", "Rav", "Syl", "Tor", "Ulm", "Vex",
    "Wyn", "Xan", "Yor", "Zep",
];
pub const BRAND_TAILS: &[&str] = &["tra", "alo", "ix", "ora", "ex", "una", "ion", "ara", "isk", "eon", "ova", "ent"];
pub const BRAND_SUFFIXES: &[&str] =
    &["", " Gear", " Labs", " Outdoors", " Co.", " Works", " Audio", " Home", " Sports", " Tech"];

pub const PRODUCT_LINES: &[&str] = &[
    "Trail", "Summit", "Urban", "Aero", "Pro", "Flex", "Nova", "Edge", "Peak", "Core", "Pulse", "Terra",
    "Drift", "Echo", "Vista", "Swift",
];

pub const PRODUCT_FEATURES: &[&str] = &[
    "waterproof", "lightweight", "machine washable", "BPA-free", "noise cancelling",
    "rechargeable battery", "foldable design", "non-slip grip", "stainless steel", "recycled materials",
    "wireless charging", "UV protection", "quick-dry fabric", "ergonomic handle", "dishwasher safe",
    "shock resistant", "adjustable straps", "insulated lining", "LED indicator", "carrying pouch",
    "lifetime warranty", "breathable mesh", "memory foam", "anti-fog coating", "magnetic closure",
    "touch controls", "long battery life", "compact storage", "eco-friendly packaging",
    "reflective details", "scratch resistant", "heat resistant", "leak proof", "silicone seal",
    "carbon fiber frame", "aluminum body", "USB-C port", "voice assistant", "water resistant zipper",
    "thermal insulation", "odor resistant", "washable cover", "anti-slip base", "one-hand operation",
    "fast charging", "tool-free assembly", "cordless design", "low noise motor", "ceramic coating",
    "padded handle", "cushioned sole", "glow in the dark", "bamboo construction", "hypoallergenic",
    "flame retardant", "tangle-free cable", "multi-device pairing", "removable liner",
    "pressure relief", "tempered glass",
];

pub const PRODUCT_USES: &[&str] = &[
    "weekend camping trips", "daily commuting", "long-distance hiking", "home workouts",
    "family kitchens", "office desks", "travel", "rainy days", "early morning runs", "backcountry trips",
    "small apartments", "gifts", "beginners", "experienced athletes", "busy parents",
];

pub const REVIEW_SUMMARIES: &[&str] = &[
    "Great value", "Works as described", "Better than expected", "Solid purchase", "Not bad",
    "Returned it", "Five stars", "Good but pricey", "Exactly what I needed", "Decent quality",
];
pub const REVIEW_TEXTS: &[&str] = &[
    "Arrived quickly and the packaging was neat.",
    "I have used it for a month now and it still holds up.",
    "The instructions could be clearer, but setup was easy enough.",
    "My partner liked it so much that we ordered a second one.",
    "It is a little smaller than the photos suggest.",
    "Customer service answered my question within a day.",
    "Good build quality for the price.",
    "It does the job, nothing more and nothing less.",
    "After a few weeks the finish started to wear.",
    "Would recommend to friends.",
];

pub const FIELD_BASES: &[&str] = &[
    "Machine Learning", "Computer Vision", "Natural Language Processing", "Robotics", "Databases",
    "Computer Networks", "Cryptography", "Quantum Computing", "Bioinformatics", "Neuroscience",
    "Materials Science", "Climate Science", "Astrophysics", "Condensed Matter Physics",
    "Organic Chemistry", "Epidemiology", "Economics", "Operations Research", "Control Theory",
    "Signal Processing", "Human-Computer Interaction", "Software Engineering", "Distributed Systems",
    "Information Retrieval", "Graph Theory", "Statistics", "Optimization", "Computational Biology",
    "Ecology", "Linguistics",
];
pub const FIELD_MODIFIERS: &[&str] = &[
    "", "Applied ", "Theoretical ", "Computational ", "Statistical ", "Experimental ", "Large-Scale ",
    "Probabilistic ", "Interpretable ", "Efficient ",
];

pub const PLACE_HEADS: &[&str] = &[
    "Ash", "Bel", "Cam", "Dun", "El", "Fair", "Glen", "Har", "Iver", "Kings", "Lan", "Mel", "New",
    "Oak", "Port", "Rich", "Shel", "Thorn", "Wey", "York",
];
pub const PLACE_TAILS: &[&str] =
    &["ford", "ton", "wood", "field", "mouth", "bridge", "haven", "dale", "burg", "stead"];
pub const INSTITUTION_FORMS: &[&str] = &[
    "University of {}", "{} Institute of Technology", "{} State University", "{} Research Center",
    "{} College", "{} Medical School",
];

pub const FIRST_NAMES: &[&str] = &[
    "Alice", "Bruno", "Chen", "Daria", "Emeka", "Farah", "Gustavo", "Hana", "Ivan", "Jia", "Kofi",
    "Lena", "Mateo", "Nadia", "Omar", "Priya", "Quentin", "Rosa", "Sven", "Tariq", "Uma", "Victor",
    "Wei", "Ximena", "Yusuf", "Zara", "Aiko", "Bjorn", "Carmen", "Dmitri", "Elif", "Felix", "Grace",
    "Hugo", "Ines", "Jonas", "Kiran", "Luca", "Mei", "Nils", "Olga", "Pablo", "Rania", "Sofia",
    "Tomas", "Ulrich", "Vera", "Wanjiru", "Yara", "Zoltan", "Amara", "Boris", "Celine", "Diego",
    "Esther", "Fatima", "Goran", "Helga", "Isaac", "Julia",
];
pub const LAST_NAMES: &[&str] = &[
    "Abara", "Becker", "Castillo", "Dubois", "Eriksen", "Fischer", "Garcia", "Hoffmann", "Ito",
    "Jensen", "Kowalski", "Laurent", "Moreau", "Nakamura", "Okafor", "Petrov", "Quinn", "Rossi",
    "Schmidt", "Tanaka", "Urquhart", "Varga", "Wagner", "Xu", "Yamamoto", "Zhang", "Almeida",
    "Bianchi", "Costa", "Dimitrov", "Esposito", "Ferreira", "Gomez", "Horvat", "Ibrahim", "Jovanovic",
    "Kim", "Lindqvist", "Mendes", "Novak", "Olsen", "Park", "Reyes", "Silva", "Takahashi", "Ueda",
    "Vasquez", "Weber", "Yilmaz", "Zielinski", "Andersson", "Brennan", "Chowdhury", "Da Silva",
    "Ekstrom", "Fontaine", "Gupta", "Haddad", "Iyer", "Kaur", "Lopez", "Mwangi", "Nguyen", "Owusu",
    "Popescu", "Ramirez", "Sato", "Tran", "Volkov", "Wright", "Young", "Zhou", "Bauer", "Cohen",
    "Dalton", "Evans", "Franke", "Greco", "Hale", "Ivanova",
];

pub const PAPER_ADJECTIVES: &[&str] = &[
    "Scalable", "Robust", "Efficient", "Interpretable", "Unified", "Adaptive", "Provable", "Sparse",
    "Hierarchical", "Distributed", "Fast", "Private", "Multi-Scale", "Causal", "Generalizable",
];
pub const PAPER_METHODS: &[&str] = &[
    "contrastive learning", "graph neural networks", "transformers", "reinforcement learning",
    "federated learning", "variational inference", "diffusion models", "knowledge distillation",
    "active learning", "meta-learning", "sparse attention", "bayesian optimization",
    "causal inference", "self-supervised pretraining", "low-rank adaptation", "spectral clustering",
    "monte carlo tree search", "differential privacy", "mixture of experts",
    "neural architecture search", "kernel methods", "gaussian processes", "random forests",
    "message passing", "optimal transport", "energy-based models", "curriculum learning",
    "symbolic regression", "tensor decomposition", "stochastic gradient descent",
    "retrieval augmentation", "label propagation", "hashing", "compressed sensing",
    "game theory", "model predictive control", "topological data analysis", "point processes",
    "normalizing flows", "sequence alignment",
];
pub const PAPER_TASKS: &[&str] = &[
    "Molecular Property Prediction", "Traffic Forecasting", "Image Segmentation",
    "Question Answering", "Recommendation", "Protein Folding", "Anomaly Detection",
    "Speech Recognition", "Query Optimization", "Climate Modeling", "Drug Discovery",
    "Link Prediction", "Machine Translation", "Robot Navigation", "Fraud Detection",
    "Medical Imaging", "Code Generation", "Entity Resolution", "Power Grid Control",
    "Crop Yield Estimation",
];
pub const VENUES: &[&str] = &[
    "NeurIPS", "ICML", "ICLR", "KDD", "WWW", "SIGIR", "ACL", "EMNLP", "CVPR", "AAAI", "VLDB",
    "SIGMOD", "Nature Communications", "PLOS ONE", "Physical Review B", "Bioinformatics",
];

pub const DRUG_HEADS: &[&str] = &[
    "Vel", "Ator", "Ben", "Cal", "Dapa", "Elo", "Fina", "Gli", "Hydro", "Ima", "Keto", "Lora", "Meto",
    "Nira", "Ola", "Pembro", "Quina", "Rivaro", "Sema", "Tofa", "Ume", "Vora", "Zano", "Abe", "Bosu",
];
pub const DRUG_MIDS: &[&str] = &["", "ti", "ra", "zo", "ve", "lo", "ci", "pa", "mo", "xi"];
/// (suffix, drug class)
pub const DRUG_CLASSES: &[(&str, &str)] = &[
    ("mab", "monoclonal antibody"),
    ("nib", "kinase inhibitor"),
    ("pril", "ACE inhibitor"),
    ("olol", "beta blocker"),
    ("statin", "HMG-CoA reductase inhibitor"),
    ("vir", "antiviral agent"),
    ("cillin", "penicillin antibiotic"),
    ("azole", "antifungal agent"),
    ("tide", "peptide hormone analogue"),
    ("prazole", "proton pump inhibitor"),
    ("sartan", "angiotensin receptor blocker"),
    ("gliptin", "DPP-4 inhibitor"),
];
pub const DRUG_FEATURES: &[&str] = &[
    "oral administration", "intravenous infusion", "hepatotoxicity", "once daily dosing",
    "approved for pediatric use", "black box warning", "renal clearance", "extended release",
    "subcutaneous injection", "QT prolongation", "orphan drug designation", "photosensitivity",
    "crosses the blood-brain barrier", "CYP3A4 metabolism", "weight gain", "bone marrow suppression",
    "taken with food", "biosimilar available", "controlled substance", "teratogenic risk",
];

pub const ORGANS: &[&str] = &[
    "renal", "hepatic", "pulmonary", "cardiac", "retinal", "cutaneous", "neuromuscular", "intestinal",
    "pancreatic", "thyroid", "vascular", "skeletal", "cerebral", "adrenal", "lymphatic",
];
pub const DISEASE_ADJECTIVES: &[&str] = &[
    "chronic", "acute", "hereditary", "juvenile", "progressive", "idiopathic", "autoimmune",
    "congenital", "familial", "early-onset",
];
pub const DISEASE_NOUNS: &[&str] = &[
    "fibrosis", "dystrophy", "carcinoma", "insufficiency", "inflammation", "neuropathy", "sclerosis",
    "atrophy", "hypertension", "degeneration", "dysplasia", "stenosis",
];
pub const SYMPTOMS: &[&str] = &[
    "joint pain", "fatigue", "hearing loss", "skin rash", "seizures", "muscle weakness",
    "shortness of breath", "blurred vision", "chest pain", "weight loss", "night sweats", "fever",
    "abdominal pain", "memory loss", "tremor", "swelling of the legs", "hair loss", "dizziness",
    "chronic cough", "kidney stones", "jaundice", "bone fractures", "palpitations", "numbness",
    "excessive thirst", "frequent infections", "easy bruising", "headaches", "nausea",
    "sleep disturbance", "loss of appetite", "dry eyes", "hoarseness", "slow growth",
    "speech difficulties", "muscle cramps", "cold intolerance", "anemia", "back pain", "itching",
];

pub const GENE_LETTERS: &[&str] = &[
    "AB", "AC", "AD", "AK", "AL", "AP", "AR", "BC", "BR", "CA", "CD", "CF", "CH", "CL", "CO", "CR",
    "DN", "DR", "EG", "ER", "FG", "FO", "GA", "GR", "HD", "HL", "IL", "IR", "JA", "KC", "KR", "LR",
    "MA", "MT", "NF", "NO", "PA", "PD", "PI", "PT", "RA", "RB", "SC", "SL", "SM", "SO", "TG", "TN",
    "TP", "UB", "VE", "WN", "XR", "ZN",
];
pub const GENE_FAMILIES: &[&str] = &[
    "kinase", "receptor", "transporter", "transcription factor", "phosphatase", "ligase",
    "ion channel", "growth factor", "cytokine", "protease", "dehydrogenase", "binding protein",
];
pub const PROCESSES: &[&str] = &[
    "cell cycle regulation", "DNA repair", "lipid metabolism", "immune response", "apoptosis",
    "angiogenesis", "glucose homeostasis", "synaptic transmission", "autophagy", "wound healing",
    "oxidative stress response", "iron transport", "circadian rhythm", "cell migration",
    "protein folding", "mitochondrial respiration", "insulin signaling", "bone remodeling",
    "inflammation control", "hormone secretion", "chromatin remodeling", "RNA splicing",
    "cholesterol synthesis", "neuronal development", "T cell activation", "collagen formation",
    "calcium signaling", "xenobiotic metabolism", "hypoxia response", "stem cell maintenance",
];
pub const PATHWAY_MOLECULES: &[&str] = &[
    "Wnt", "Notch", "Hedgehog", "MAPK", "PI3K-Akt", "mTOR", "JAK-STAT", "NF-kB", "TGF-beta", "VEGF",
    "Insulin", "Calcium", "cAMP", "Hippo", "p53", "Toll-like receptor", "AMPK", "Ras", "ErbB", "FoxO",
];
pub const PATHWAY_FORMS: &[&str] =
    &["{} signaling pathway", "{} regulatory network", "{} cascade", "{} response module"];

pub const PATHWAY_CONTEXTS: &[&str] = &[
    "", "Neuronal ", "Hepatic ", "Cardiac ", "Epithelial ", "Immune ", "Endothelial ", "Muscle ",
    "Adipose ", "Renal ", "Pancreatic ", "Bone ", "Skin ", "Intestinal ", "Lung ", "Retinal ",
    "Germline ", "Embryonic ", "Tumor ", "Stromal ",
];
